# The worker image: szbench with the worker extra (docker SDK, MNE, edfio) and Flower (the
# `ops` extra), for the Celery workers, the Flower queue view and dataset imports. Built by
# scripts/build-project-images.sh from host-built wheels; nothing is downloaded here.
FROM szbench/python-base:bookworm AS build
COPY wheels /wheels
# Dependencies first (their layer stays cached while only szbench changes), then szbench.
RUN python3 -m venv /opt/szbench \
    && /opt/szbench/bin/pip install --no-index --no-deps --no-compile -q -r /wheels/worker.txt
COPY project /project
RUN /opt/szbench/bin/pip install --no-index --no-deps --no-compile -q /project/szbench-*.whl \
    && /opt/szbench/bin/pip check \
    && /opt/szbench/bin/python -m compileall -q /opt/szbench/lib

FROM szbench/python-base:bookworm
# The worker talks to the host's dockerd through its socket; the compose file adds the
# socket's group (SZBENCH_DOCKER_GID) to this user at run time.
RUN groupadd --gid 10001 szbench \
    && useradd --uid 10001 --gid 10001 --home-dir /var/lib/szbench --no-create-home \
        --shell /usr/sbin/nologin szbench \
    && install -d -o 10001 -g 10001 /var/lib/szbench
COPY --from=build /opt/szbench /opt/szbench
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
