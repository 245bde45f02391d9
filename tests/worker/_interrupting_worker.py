"""A ``celery worker`` that sends itself SIGQUIT at one chosen moment of a container run.

A cold shutdown raises into the running task from Celery's signal handler, on whatever line
the worker is on. An operator's (or a test's) SIGQUIT lands on a given line only by chance,
more often on a loaded machine; this entry point makes the worker signal itself there, so
that a test can check each such moment every time:

- ``created``: the engine has just created the container; ``create`` has not returned it;
- ``watchdog``: the container runs; the runner's watchdog thread has not run yet (on a
  loaded machine the runner can wait there a while, just when the container is seen running);
- ``removing``: the run has ended; the runner is about to remove its container.

Run as ``python -m tests.worker._interrupting_worker -A szbench_worker.celery_app worker ...``
with ``SZBENCH_TEST_INTERRUPT_AT`` set to one of them. It fires once, at the first such
moment, through ``os.kill``: Celery's own handler runs, as for an operator's signal.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from celery.__main__ import main
from docker.api.container import ContainerApiMixin

MOMENTS = ("created", "watchdog", "removing")


def install(moment: str) -> None:
    """Patch the docker SDK (or threading) so that this process gets SIGQUIT at ``moment``."""
    if moment not in MOMENTS:
        raise SystemExit(f"SZBENCH_TEST_INTERRUPT_AT must be one of {MOMENTS}, not {moment!r}")
    fired = False

    def sigquit_once() -> None:
        nonlocal fired
        if not fired:
            fired = True
            os.kill(os.getpid(), signal.SIGQUIT)

    create_container = ContainerApiMixin.create_container
    remove_container = ContainerApiMixin.remove_container

    def created(self: Any, *args: Any, **kwargs: Any) -> Any:
        response = create_container(self, *args, **kwargs)
        sigquit_once()
        return response

    def removing(self: Any, *args: Any, **kwargs: Any) -> Any:
        sigquit_once()
        return remove_container(self, *args, **kwargs)

    thread_start = threading.Thread.start

    def watchdog(self: threading.Thread) -> None:
        if self.name == "szbench-run-watchdog":
            sigquit_once()
        thread_start(self)

    if moment == "created":
        ContainerApiMixin.create_container = created  # type: ignore[method-assign]
    elif moment == "watchdog":
        threading.Thread.start = watchdog  # type: ignore[method-assign]
    else:
        ContainerApiMixin.remove_container = removing  # type: ignore[method-assign]


if __name__ == "__main__":
    install(os.environ["SZBENCH_TEST_INTERRUPT_AT"])
    sys.argv[0] = "celery"
    sys.exit(main())
