"""Where the API reaches the evaluation pipeline's write services.

Creating, cancelling, re-running and re-scoring evaluations, smoke tests, dataset
registration and continuous benchmarking are the pipeline's services
(:mod:`szbench.evaluations.service`, :mod:`szbench.datasets.service`; see
PLATFORM_CONTRACT.md). Routers reach them through these two getters so that a build without
them answers 503 with a clear message instead of failing to start.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from szbench.errors import ServiceUnavailable


def _load(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:  # a real bug inside the module: let it surface
            raise
        raise ServiceUnavailable(
            f"the evaluation pipeline ({name}) is not installed on this server"
        ) from exc


def evaluation_service() -> ModuleType:
    return _load("szbench.evaluations.service")


def dataset_service() -> ModuleType:
    return _load("szbench.datasets.service")
