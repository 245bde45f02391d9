# PostgreSQL 15 from Debian's packages, for hosts that cannot pull the upstream image (and the
# compose test here). Honours the upstream image's variables: POSTGRES_USER, POSTGRES_PASSWORD,
# POSTGRES_DB, PGDATA. Built by scripts/build-project-images.sh --services.
FROM szbench/debian-services:bookworm
# Debian's package made a "main" cluster at install time; this image keeps its data in PGDATA.
RUN rm -rf /var/lib/postgresql/15 /etc/postgresql/15 \
    && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data \
    && install -d -o postgres -g postgres -m 2775 /var/run/postgresql
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
USER postgres
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]
CMD ["postgres"]
