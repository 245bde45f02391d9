"""Malformed messages on a run queue: logged, dead-lettered, and the worker keeps consuming.

A real ``celery worker`` on a Redis of the test's own. Anything can push to a Redis list
(a script with the broker's password, a bug in another client), and before this each such
message ended the worker process ("Unrecoverable error: JSONDecodeError"), once per message,
while the evaluations it served showed "running".
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import redis

from szbench.broker import DEAD_LETTER_KEY

from .test_reconcile_celery import (
    OwnRedis,
    Workers,
    _assert_done_exactly_once,
    _evaluation,
    _finished,
    faults,  # noqa: F401 (a fixture)
    slow_image,  # noqa: F401 (a fixture)
    wait_until,
)

pytestmark = [pytest.mark.docker, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]


def _envelope(body: str, *, encoding: str = "base64") -> bytes:
    """A kombu message envelope as the Redis transport stores it, with ``body`` as given."""
    return json.dumps(
        {
            "body": body,
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {},
            "properties": {
                "body_encoding": encoding,
                "delivery_tag": "0d6f7f1c-0000-0000-0000-000000000000",
                "delivery_info": {"exchange": "szbench", "routing_key": "cpu"},
                "priority": 0,
                "delivery_mode": 2,
            },
        }
    ).encode()


MALFORMED = {
    "not JSON": b"\x00{this is not json",
    "body not base64": _envelope("%%% not base64 %%%"),
    "not an envelope": b"[1, 2, 3]",
    "a body that is not a task": _envelope(base64.b64encode(b"\xff\xfe").decode()),
}


def test_malformed_messages_are_dead_lettered_and_the_worker_keeps_consuming(
    faults: tuple[Workers, str, OwnRedis],  # noqa: F811
    slow_image: str,  # noqa: F811
    docker_client: Any,
    tmp_path: Path,
) -> None:
    workers, _host, broker = faults
    client = redis.Redis.from_url(broker.url)
    worker = workers.start("consumer")
    for raw in MALFORMED.values():
        client.lpush("cpu", raw)
    # A real evaluation after them: its start task and its runs go through the same queue.
    evaluation_id = _evaluation(slow_image, docker_client, tmp_path, 2)
    wait_until(_finished(evaluation_id), 120, "the evaluation", workers)
    _assert_done_exactly_once(evaluation_id, 2)
    assert worker.poll() is None, f"the worker must live on\n{workers.logs()}"
    letters = [json.loads(x) for x in client.lrange(DEAD_LETTER_KEY, 0, -1)]
    # The envelope-level faults are the broker transport's to catch; a body that decodes but
    # is no task is Celery's own (it logs and drops it, as before).
    kept = {letter["raw"] for letter in letters}
    for what in ("not JSON", "body not base64", "not an envelope"):
        assert MALFORMED[what].decode("utf-8", "replace") in kept, (what, letters)
    assert all(letter["queue"] == "cpu" and letter["error"] for letter in letters)
    log = (workers.log_dir / "consumer.log").read_text(errors="replace")
    assert log.count("dead-lettered a malformed message") == len(letters)
