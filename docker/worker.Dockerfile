# The worker image: szbench with the worker extra (docker SDK, MNE, edfio) and Flower (the
# `ops` extra), for the Celery workers, the Flower queue view and dataset imports. Built by
# scripts/build-project-images.sh from host-built wheels; nothing is downloaded here.

# Stage 1: the dependencies, from the wheels resolved on the host at requirements.lock's
# versions (the same as CI and scripts/setup.sh install). Its result is copied into
# the image as one layer that the engine keeps cached while only szbench itself changes.
FROM szbench/python-base:bookworm AS deps
COPY wheels /wheels
RUN python3 -m venv /opt/szbench \
    && /opt/szbench/bin/pip install --no-index --no-deps -q -r /wheels/worker.txt

FROM szbench/python-base:bookworm
# The worker talks to the host's dockerd through its socket; the compose file adds the
# socket's group (SZBENCH_DOCKER_GID) to this user at run time.
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
    SZBENCH_LOG_FORMAT=json \
    MPLCONFIGDIR=/tmp/matplotlib
USER 10001:10001
WORKDIR /var/lib/szbench
# tini as PID 1 forwards SIGTERM to Celery, whose warm shutdown lets the current run finish
# (or, past the stop grace period, the late-acked task goes back to the queue).
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["celery", "-A", "szbench_worker.celery_app", "worker", "--loglevel=INFO", "--concurrency=1", "--queues=cpu"]
