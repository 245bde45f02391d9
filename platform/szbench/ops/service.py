"""Readiness checks and the Prometheus metrics read from the database and broker."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import case, func, select, text

from szbench.config import get_settings
from szbench.db import get_sessionmaker
from szbench.models import Evaluation, EvaluationStatus, RecordingRun, WorkerHeartbeat

log = logging.getLogger(__name__)

RUN_DURATION_BUCKETS_S = (10.0, 60.0, 300.0, 600.0, 900.0, 1800.0, 3600.0)
KNOWN_QUEUES = ("cpu", "gpu", "score")


@lru_cache
def migration_heads() -> frozenset[str]:
    from alembic.script import ScriptDirectory

    from szbench.migrate import alembic_config

    return frozenset(ScriptDirectory.from_config(alembic_config()).get_heads())


def check_database() -> str | None:
    """None when the database answers and its schema is at the migrations' head."""
    try:
        with get_sessionmaker()() as session:
            session.execute(text("SELECT 1"))
            current = set(session.scalars(text("SELECT version_num FROM alembic_version")))
    except Exception as exc:
        log.warning("readiness: database check failed: %s", exc)
        return f"database unreachable or not migrated ({type(exc).__name__})"
    heads = migration_heads()
    if current != set(heads):
        return f"database schema at {sorted(current) or 'nothing'}, migrations at {sorted(heads)}"
    return None


def _redis_client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)


def check_broker() -> str | None:
    """None when no broker is configured (embedded mode) or it answers."""
    url = get_settings().broker_url
    if not url:
        return None
    try:
        if url.startswith(("redis://", "rediss://")):
            _redis_client(url).ping()
        else:
            from kombu import Connection  # type: ignore[attr-defined]

            with Connection(url, connect_timeout=1.0) as conn:  # type: ignore[no-untyped-call]
                conn.ensure_connection(max_retries=1)
    except Exception as exc:
        log.warning("readiness: broker check failed: %s", exc)
        return f"broker unreachable ({type(exc).__name__})"
    return None


def broker_queue_lengths(queues: list[str]) -> dict[str, int]:
    """Messages waiting in each Redis queue (Celery keeps a queue as a Redis list)."""
    url = get_settings().broker_url
    if not url.startswith(("redis://", "rediss://")):
        return {}
    client = _redis_client(url)
    pipe = client.pipeline()
    for queue in queues:
        pipe.llen(queue)
    return dict(zip(queues, (int(n) for n in pipe.execute()), strict=True))


class DatabaseCollector(Collector):
    """Queue, run, worker and GPU figures, read from the database (and broker) on each scrape.

    The database and the broker are read apart: a broker outage drops only the queue
    lengths (``szbench_metrics_broker_up 0``), never the database's figures, and the other
    way round.
    """

    def describe(self) -> list[Metric]:
        # Without this the registry would call collect(), i.e. query the database, at
        # registration time (when the app is created), before anything is migrated.
        return []

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        queues = set(KNOWN_QUEUES)
        db_up = GaugeMetricFamily("szbench_metrics_db_up", "Database figures were readable.")
        try:
            figures = list(self._collect(queues))
        except Exception as exc:  # a scrape must not fail because the database is down
            log.warning("metrics: database collection failed: %s", exc)
            db_up.add_metric([], 0)
        else:
            db_up.add_metric([], 1)
            yield from figures
        yield db_up
        yield from _broker_figures(sorted(queues))
        took = GaugeMetricFamily(
            "szbench_metrics_collect_seconds", "Time spent reading the figures for this scrape."
        )
        took.add_metric([], time.perf_counter() - started)
        yield took

    def _collect(self, queues: set[str]) -> Iterator[Metric]:
        """The database's figures; ``queues`` gains every queue they name."""
        settings = get_settings()
        active = (EvaluationStatus.QUEUED, EvaluationStatus.RUNNING, EvaluationStatus.SCORING)
        with get_sessionmaker()() as session:
            evaluations = session.execute(
                select(Evaluation.status, func.count(Evaluation.id)).group_by(Evaluation.status)
            ).all()
            outcomes = session.execute(
                select(RecordingRun.outcome, func.count(RecordingRun.id))
                .where(RecordingRun.outcome.is_not(None))
                .group_by(RecordingRun.outcome)
            ).all()
            pending = session.execute(
                select(
                    Evaluation.queue,
                    func.sum(case((RecordingRun.started_at.is_(None), 1), else_=0)),
                    func.sum(case((RecordingRun.started_at.is_not(None), 1), else_=0)),
                )
                .join(Evaluation, RecordingRun.evaluation_id == Evaluation.id)
                .where(RecordingRun.outcome.is_(None), Evaluation.status.in_(active))
                .group_by(Evaluation.queue)
            ).all()
            gpu_hosts = session.execute(
                select(RecordingRun.worker_host, func.count(RecordingRun.id))
                .join(Evaluation, RecordingRun.evaluation_id == Evaluation.id)
                .where(
                    RecordingRun.outcome.is_(None),
                    RecordingRun.started_at.is_not(None),
                    RecordingRun.gpu_model.is_not(None) | (Evaluation.queue == "gpu"),
                    Evaluation.status.in_(active),
                )
                .group_by(RecordingRun.worker_host)
            ).all()
            bucket_cols = [
                func.sum(case((RecordingRun.wall_time_s <= b, 1), else_=0))
                for b in RUN_DURATION_BUCKETS_S
            ]
            durations = session.execute(
                select(
                    func.count(RecordingRun.id), func.sum(RecordingRun.wall_time_s), *bucket_cols
                ).where(
                    RecordingRun.wall_time_s.is_not(None), RecordingRun.reused_from_id.is_(None)
                )
            ).one()
            since = datetime.now(UTC) - timedelta(seconds=settings.worker_heartbeat_timeout_s)
            beats = session.execute(
                select(WorkerHeartbeat.queues, WorkerHeartbeat.fault_kind).where(
                    WorkerHeartbeat.last_seen_at >= since
                )
            ).all()

        gauge = GaugeMetricFamily(
            "szbench_evaluations", "Evaluations by status.", labels=["status"]
        )
        for status, n in evaluations:
            gauge.add_metric([str(status)], n)
        yield gauge

        runs = CounterMetricFamily(
            "szbench_runs_finished", "Recording runs finished, by outcome.", labels=["outcome"]
        )
        for outcome, n in outcomes:
            runs.add_metric([str(outcome)], n)
        yield runs

        waiting = GaugeMetricFamily(
            "szbench_runs_waiting", "Recording runs not started yet, by queue.", labels=["queue"]
        )
        running = GaugeMetricFamily(
            "szbench_runs_running", "Recording runs in progress, by queue.", labels=["queue"]
        )
        for queue, n_wait, n_run in pending:
            queues.add(queue)
            waiting.add_metric([queue], n_wait or 0)
            running.add_metric([queue], n_run or 0)
        yield waiting
        yield running

        yield from _worker_figures(beats)

        gpus = GaugeMetricFamily(
            "szbench_gpus_in_use", "GPUs running a recording now, by worker host.", labels=["host"]
        )
        for host, n in gpu_hosts:
            gpus.add_metric([host or "unknown"], n)
        yield gpus

        count, total, *cumulative = durations
        hist = HistogramMetricFamily(
            "szbench_run_duration_seconds", "Wall time of container runs (reused runs excluded)."
        )
        buckets = [
            (str(b), int(c or 0)) for b, c in zip(RUN_DURATION_BUCKETS_S, cumulative, strict=True)
        ]
        buckets.append(("+Inf", int(count or 0)))
        hist.add_metric([], buckets=buckets, sum_value=float(total or 0.0))
        yield hist


def _worker_figures(beats: Any) -> Iterator[Metric]:
    """Live workers per queue, and those that take no runs, by what their host lacks
    (``worker_heartbeats.fault_kind``: docs/operations.md, "A sick host")."""
    live: dict[str, int] = {}
    sick: dict[tuple[str, str], int] = {}
    for queues, fault_kind in beats:
        for queue in queues or ():
            live[queue] = live.get(queue, 0) + 1
            if fault_kind:
                sick[queue, fault_kind] = sick.get((queue, fault_kind), 0) + 1
    workers = GaugeMetricFamily(
        "szbench_workers_live",
        "Workers heard from within the heartbeat timeout, by queue.",
        labels=["queue"],
    )
    for queue, n in sorted(live.items()):
        workers.add_metric([queue], n)
    yield workers
    unfit = GaugeMetricFamily(
        "szbench_workers_sick",
        "Live workers taking no runs, by queue and what their host lacks.",
        labels=["queue", "reason"],
    )
    for (queue, reason), n in sorted(sick.items()):
        unfit.add_metric([queue, reason], n)
    yield unfit


def _broker_figures(queues: list[str]) -> Iterator[Metric]:
    """Queue lengths, and whether the broker answered (nothing without a Redis broker)."""
    if not get_settings().broker_url.startswith(("redis://", "rediss://")):
        return
    up = GaugeMetricFamily("szbench_metrics_broker_up", "The broker's queue lengths were readable.")
    try:
        lengths = broker_queue_lengths(queues)
    except Exception as exc:
        log.warning("metrics: the broker's queue lengths are unreadable: %s", exc)
        up.add_metric([], 0)
        yield up
        return
    up.add_metric([], 1)
    yield up
    broker = GaugeMetricFamily(
        "szbench_queue_length", "Messages waiting in the broker, by queue.", labels=["queue"]
    )
    for queue, n in lengths.items():
        broker.add_metric([queue], n)
    yield broker
