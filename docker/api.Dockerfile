# The API image: the szbench package with its core dependencies only (FastAPI, SQLAlchemy,
# Celery client). No docker SDK and no MNE: the API enqueues work by task name and never runs
# containers or reads EEG. Built by scripts/build-project-images.sh, whose build context holds
# the wheels (built on the host) and the migrations; nothing is downloaded here.

# Stage 1: the dependencies, from the wheels resolved on the host at requirements.lock's
# versions (the same as CI and scripts/setup.sh install). Its result is copied into
# the image as one layer that the engine keeps cached while only szbench itself changes.
FROM szbench/python-base:bookworm AS deps
COPY wheels /wheels
RUN python3 -m venv /opt/szbench \
    && /opt/szbench/bin/pip install --no-index --no-deps -q -r /wheels/api.txt

FROM szbench/python-base:bookworm
RUN groupadd --gid 10001 szbench \
    && useradd --uid 10001 --gid 10001 --home-dir /var/lib/szbench --no-create-home \
        --shell /usr/sbin/nologin szbench \
    && install -d -o 10001 -g 10001 /var/lib/szbench
COPY --from=deps /opt/szbench /opt/szbench
COPY project /tmp/project
RUN /opt/szbench/bin/pip install --no-index --no-deps -q /tmp/project/szbench-*.whl \
    && /opt/szbench/bin/pip check \
    && rm -rf /tmp/project /root/.cache
COPY migrations /opt/szbench/migrations
ENV PATH=/opt/szbench/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SZBENCH_MIGRATIONS_DIR=/opt/szbench/migrations \
    SZBENCH_DATA_DIR=/var/lib/szbench \
    SZBENCH_LOG_FORMAT=json
USER 10001:10001
WORKDIR /var/lib/szbench
EXPOSE 8000
# tini reaps children and forwards SIGTERM, so uvicorn shuts down gracefully on `docker stop`.
# Uvicorn re-raises the SIGTERM after its graceful shutdown (exit 143): -e 143 reports that
# planned stop as success, so a crash stays distinguishable from a stop.
ENTRYPOINT ["/usr/bin/tini", "-e", "143", "--"]
# The app factory directly (not `szbench serve`): no embedded worker in this image, and
# uvicorn reads UVICORN_* variables (e.g. UVICORN_WORKERS) for tuning. No proxy headers in
# uvicorn: the app believes X-Forwarded-* only from SZBENCH_FORWARDED_ALLOW_IPS and takes the
# client as the proxy appends it (szbench.api.proxies, docs/security.md).
CMD ["uvicorn", "--factory", "szbench.app:create_production_app", "--host", "0.0.0.0", "--port", "8000", \
     "--no-proxy-headers"]
