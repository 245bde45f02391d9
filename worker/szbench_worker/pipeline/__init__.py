"""The evaluation pipeline's logic, free of Celery so that it is tested without a broker.

Each public function is one task's body (``szbench_worker.tasks`` wraps them thinly). Every
one is idempotent: it may run twice, concurrently, or after a crash half-way, and the
database ends the same. The rules that make it so (docs/pipeline.md):

- a row is changed only under its lock (``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite
  serialises writers), after re-checking the state that decides the change (:mod:`.rows`);
- one :class:`RecordingRun` per (evaluation, recording), by a unique constraint, created with
  ``INSERT ... ON CONFLICT DO NOTHING`` (:mod:`.start`);
- a run counts towards progress in the same transaction that sets its ``finished_at``, so a
  retried task can never count it twice, and a result computed by a second, redundant
  delivery is dropped when the run is already finished (:mod:`.store`, :mod:`.progress`);
- the dataset-level aggregation happens in one transaction that moves the evaluation from
  RUNNING to DONE, so it happens exactly once (:mod:`.finish`);
- follow-up tasks are sent after the commit they depend on (``enqueue_after_commit``).

The container never sees the reference annotations: scoring happens here, in the worker,
after the run (:mod:`.score`).

One idea per module:

- :mod:`.deps`: the runner and image resolver of this worker (injectable);
- :mod:`.rows`: locks and idempotent inserts; :mod:`.progress`: counting finished runs;
- :mod:`.start`: an evaluation's runs; :mod:`.reuse`: finished runs that serve again;
- :mod:`.claim`: a run claimed before its container starts; :mod:`.run`: one recording;
- :mod:`.store`: a run's result stored once; :mod:`.faults`: the platform's faults;
- :mod:`.score`: one run scored; :mod:`.report`: the dataset report as rows;
- :mod:`.finish`: the aggregation that ends an evaluation; :mod:`.rescore`: new parameters
  on stored detections; :mod:`.smoke`: a new version's first run;
- :mod:`.task_failure`: what a task that fails for good leaves behind.

The names below are the package's public interface; the rest of the project imports them
from here.
"""

from szbench_worker.pipeline.claim import run_limits
from szbench_worker.pipeline.deps import Dependencies, remove_run_leftovers, set_dependencies
from szbench_worker.pipeline.faults import INFRA_MESSAGE
from szbench_worker.pipeline.finish import finalize_evaluation
from szbench_worker.pipeline.rescore import rescore_evaluation
from szbench_worker.pipeline.run import run_recording, work_dir
from szbench_worker.pipeline.smoke import SmokeOutcome, smoke_test
from szbench_worker.pipeline.start import StartOutcome, start_evaluation
from szbench_worker.pipeline.store import IMAGE_REFUSED_MESSAGE, RunStep
from szbench_worker.pipeline.task_failure import record_task_failure

__all__ = [
    "IMAGE_REFUSED_MESSAGE",
    "INFRA_MESSAGE",
    "Dependencies",
    "RunStep",
    "SmokeOutcome",
    "StartOutcome",
    "finalize_evaluation",
    "record_task_failure",
    "remove_run_leftovers",
    "rescore_evaluation",
    "run_limits",
    "run_recording",
    "set_dependencies",
    "smoke_test",
    "start_evaluation",
    "work_dir",
]
