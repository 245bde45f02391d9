# The private image registry (Debian's docker-registry, the CNCF distribution registry) for
# hosts that cannot pull the upstream registry image. Configured by REGISTRY_* variables as
# upstream; storage in /var/lib/registry. Built by scripts/build-project-images.sh --services.
FROM szbench/debian-services:bookworm
RUN install -d -o docker-registry -g docker-registry /var/lib/registry
ENV REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY=/var/lib/registry \
    REGISTRY_HTTP_ADDR=0.0.0.0:5000
USER docker-registry
EXPOSE 5000
CMD ["docker-registry", "serve", "/etc/docker/registry/config.yml"]
