"""Structured logs: JSON and text formats, request ids over a real ASGI app, Celery task ids."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from celery import Celery
from fastapi import FastAPI
from fastapi.testclient import TestClient

from szbench.config import Settings
from szbench.logging import (
    REQUEST_ID_HEADER,
    RequestIdMiddleware,
    bind_context,
    configure_logging,
    current_context,
    install_celery_log_context,
)


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _lines(stream: io.StringIO) -> list[str]:
    return [line for line in stream.getvalue().splitlines() if line.strip()]


@pytest.mark.usefixtures("restore_root_logger")
def test_json_format_one_object_per_line_with_context_and_extra() -> None:
    out = io.StringIO()
    configure_logging(Settings(log_format="json", log_level="INFO"), stream=out)
    log = logging.getLogger("szbench.test")
    with bind_context(request_id="req-1"):
        log.info("uploaded %s", "algo.tar", extra={"size_bytes": 42})
    log.info("outside")
    log.debug("hidden at INFO")

    records = [json.loads(line) for line in _lines(out)]
    assert len(records) == 2
    first, second = records
    assert first["message"] == "uploaded algo.tar"
    assert first["level"] == "INFO"
    assert first["logger"] == "szbench.test"
    assert first["request_id"] == "req-1"
    assert first["size_bytes"] == 42
    assert "time" in first
    assert "request_id" not in second


@pytest.mark.usefixtures("restore_root_logger")
def test_json_format_keeps_exception_and_non_ascii() -> None:
    out = io.StringIO()
    configure_logging(Settings(log_format="json"), stream=out)
    try:
        raise RuntimeError("kaputt é")
    except RuntimeError:
        logging.getLogger("szbench.test").exception("run failed")
    (record,) = [json.loads(line) for line in _lines(out)]
    assert record["level"] == "ERROR"
    assert "RuntimeError: kaputt é" in record["exc_info"]


@pytest.mark.usefixtures("restore_root_logger")
def test_text_format_and_level() -> None:
    out = io.StringIO()
    configure_logging(Settings(log_format="text", log_level="warning"), stream=out)
    log = logging.getLogger("szbench.test")
    log.info("not shown")
    with bind_context(task_id="t-9"):
        log.warning("disk %d%% full", 91)
    (line,) = _lines(out)
    assert "WARNING" in line
    assert "szbench.test [task_id=t-9]: disk 91% full" in line


@pytest.mark.usefixtures("restore_root_logger")
def test_reconfiguring_replaces_the_handler_instead_of_doubling_lines() -> None:
    out = io.StringIO()
    configure_logging(Settings(log_format="json"), stream=io.StringIO())
    configure_logging(Settings(log_format="json"), stream=out)
    logging.getLogger("szbench.test").warning("once")
    assert len(_lines(out)) == 1
    assert sum(h.get_name() == "szbench" for h in logging.getLogger().handlers) == 1


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("log_format", "xml", "SZBENCH_LOG_FORMAT"), ("log_level", "LOUD", "SZBENCH_LOG_LEVEL")],
)
@pytest.mark.usefixtures("restore_root_logger")
def test_bad_settings_name_the_variable(field: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        configure_logging(Settings(**{field: value}), stream=io.StringIO())


def test_settings_read_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SZBENCH_LOG_FORMAT", "json")
    monkeypatch.setenv("SZBENCH_LOG_LEVEL", "DEBUG")
    settings = Settings()
    assert (settings.log_format, settings.log_level) == ("json", "DEBUG")


def test_bind_context_nests_and_restores() -> None:
    with bind_context(request_id="a"):
        with bind_context(task_id="b"):
            assert current_context() == {"request_id": "a", "task_id": "b"}
        assert current_context() == {"request_id": "a"}
    assert current_context() == {}


def _app_logging_in_a_route() -> FastAPI:
    app = FastAPI()
    app.add_middleware(RequestIdMiddleware)

    @app.get("/ping")
    def ping() -> dict[str, str]:
        logging.getLogger("szbench.api").info("pong")
        return {"ok": "yes"}

    return app


@pytest.mark.usefixtures("restore_root_logger")
def test_request_id_middleware_generates_echoes_and_logs() -> None:
    out = io.StringIO()
    configure_logging(Settings(log_format="json"), stream=out)
    client = TestClient(_app_logging_in_a_route())

    made = client.get("/ping")
    kept = client.get("/ping", headers={REQUEST_ID_HEADER: "proxy-123"})
    # A header that could forge log lines is replaced, not echoed.
    forged = client.get("/ping", headers={REQUEST_ID_HEADER: "x" * 500})

    assert made.status_code == kept.status_code == forged.status_code == 200
    generated = made.headers[REQUEST_ID_HEADER]
    assert len(generated) == 32
    assert kept.headers[REQUEST_ID_HEADER] == "proxy-123"
    assert forged.headers[REQUEST_ID_HEADER] != "x" * 500
    logged = [json.loads(line) for line in _lines(out) if '"pong"' in line]
    assert [r["request_id"] for r in logged] == [
        generated,
        "proxy-123",
        forged.headers[REQUEST_ID_HEADER],
    ]


@pytest.mark.usefixtures("restore_root_logger")
def test_celery_task_logs_carry_task_id_and_name() -> None:
    out = io.StringIO()
    configure_logging(Settings(log_format="json"), stream=out)
    install_celery_log_context()
    install_celery_log_context()  # idempotent: one binding, not two
    app = Celery("szbench-log-test", broker="memory://", backend="cache+memory://")
    app.conf.task_always_eager = True

    @app.task(name="szbench.test.log_something")
    def log_something() -> str:
        logging.getLogger("szbench.worker").info("inside task")
        return "done"

    result = log_something.apply(task_id="task-abc")
    assert result.get() == "done"
    (record,) = [json.loads(line) for line in _lines(out) if '"inside task"' in line]
    assert record["task_id"] == "task-abc"
    assert record["task_name"] == "szbench.test.log_something"
    assert current_context() == {}


def test_request_ids_are_unique_hex_and_differ_in_a_forked_child() -> None:
    import os

    from szbench.logging import new_request_id

    ids = {new_request_id() for _ in range(10_000)}
    assert len(ids) == 10_000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its generator was re-seeded at the fork
        os.write(write_end, new_request_id().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child_id = os.read(read_end, 64).decode()
    os.close(read_end)
    os.close(write_end)
    assert child_id != new_request_id()
