# Redis 7 from Debian's packages (the Celery broker), for hosts that cannot pull the upstream
# image. Append-only persistence in /data so that queued tasks survive a restart.
# Built by scripts/build-project-images.sh --services.
FROM szbench/debian-services:bookworm
RUN install -d -o redis -g redis -m 0750 /data
USER redis
WORKDIR /data
EXPOSE 6379
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data", \
     "--appendonly", "yes", "--daemonize", "no", "--logfile", ""]
