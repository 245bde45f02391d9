"""Tasks that fail for good (retries exhausted, or a bug): what each leaves behind."""

from __future__ import annotations

import logging
import traceback
from typing import Any

from szbench.db import session_scope
from szbench.models import AlgorithmVersion, EvaluationStatus, VersionStatus
from szbench.notifications import events as notify
from szbench.queue import (
    TASK_FINALIZE,
    TASK_RESCORE,
    TASK_RUN_RECORDING,
    TASK_SMOKE_TEST,
    TASK_START_EVALUATION,
)
from szbench_worker.pipeline.rows import lock_evaluation, now
from szbench_worker.pipeline.store import release_run, store_infrastructure_failure

log = logging.getLogger(__name__)


def record_task_failure(
    task_name: str, kwargs: dict[str, Any], exc: BaseException, *, platform: bool = False
) -> None:
    """Record, for admins, a task that failed for good (retries exhausted or a bug).

    A run whose retries ran out on a platform fault (``platform``: the engine, the disk, the
    database or the broker, never the algorithm) is released for the reconciler, which sends
    it again, so a host that was sick for a while does not leave its evaluations FAILED. Any
    other run gets INFRASTRUCTURE_ERROR (so the evaluation can still finish, as FAILED); an
    evaluation that cannot start or finalize is FAILED; a smoke test goes back to PENDING.
    """
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-20000:]
    log.error("task %s %s failed for good: %s", task_name, kwargs, exc)
    if task_name == TASK_RUN_RECORDING and "run_id" in kwargs and platform:
        release_run(int(kwargs["run_id"]), f"[worker] gave up for a platform fault:\n{detail}")
        return
    if task_name == TASK_RUN_RECORDING and "run_id" in kwargs:
        store_infrastructure_failure(int(kwargs["run_id"]), f"task failed for good:\n{detail}")
        return
    if (
        task_name in (TASK_START_EVALUATION, TASK_FINALIZE, TASK_RESCORE)
        and "evaluation_id" in kwargs
    ):
        with session_scope() as session:
            evaluation = lock_evaluation(session, int(kwargs["evaluation_id"]))
            if evaluation is not None and not evaluation.status.finished:
                evaluation.status = EvaluationStatus.FAILED
                evaluation.finished_at = now(session)
                evaluation.message = (
                    "The evaluation failed because of a platform fault; an administrator has "
                    "the details and can re-run it."
                )
                notify.record_evaluation_end(session, evaluation)
                log.error("evaluation %s failed:\n%s", evaluation.id, detail)
        return
    if task_name == TASK_SMOKE_TEST and "algorithm_version_id" in kwargs:
        with session_scope() as session:
            version = session.get(AlgorithmVersion, int(kwargs["algorithm_version_id"]))
            if version is not None and version.status == VersionStatus.SMOKE_TESTING:
                version.status = VersionStatus.PENDING
                version.status_message = (
                    "The smoke test could not run because of a platform fault; it will be retried."
                )
