"""Where the tests find Redis: one setting for the whole suite.

``SZBENCH_TEST_REDIS`` (``host:port``, default the project's 127.0.0.1:6379) moves every
test that talks to a real broker, so two checkouts can run their suites side by side on one
machine, each against its own redis-server, without flushing each other's queues.
"""

from __future__ import annotations

import os

REDIS_HOST_PORT = os.environ.get("SZBENCH_TEST_REDIS", "127.0.0.1:6379")


def redis_url(db: int) -> str:
    """The URL of database ``db`` on the tests' Redis server."""
    return f"redis://{REDIS_HOST_PORT}/{db}"
