"""The Redis broker transport with a screen for malformed messages, and the dead letters.

Anything that can reach Redis can push to a queue's list: a script with the broker's
password, another client's bug, a half-written message. kombu's Redis transport decodes
each message inside the worker's event loop, so a message that is not JSON, or whose body is
not the base64 its envelope announces, raised out of that loop and ended the worker process
("Unrecoverable error: JSONDecodeError"), once per message, while the evaluations it served
showed "running". This transport checks each message as it comes off the queue, the way
kombu itself will read it; one that cannot be read is logged, kept in the
:data:`DEAD_LETTER_KEY` list for an administrator (``redis-cli lrange szbench.dead_letter 0
-1``, docs/operations.md) and dropped, and the worker goes on consuming.

A message that decodes but is no task of ours (unknown name, wrong arguments) is Celery's
business: it logs and drops such messages by itself.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads

log = logging.getLogger(__name__)

#: The Redis list holding malformed messages (newest first).
DEAD_LETTER_KEY = "szbench.dead_letter"
#: Dead letters kept (the oldest go): enough to diagnose, never a way to fill Redis.
DEAD_LETTER_MAX = 1000
#: Bytes of a malformed message kept in its dead letter.
_RAW_KEPT = 64 * 1024


class ScreeningChannel(kombu_redis.Channel):
    """kombu's Redis channel, which drops a message it could not read instead of raising."""

    def _brpop_read(self, **options: Any) -> Any:
        # The reply to BRPOP is read inside kombu's method, which decodes it at once: screen
        # it on its way there. A screened-out reply reads as "nothing came" (kombu's Empty).
        client = self.client
        parse = client.parse_response

        def screened(connection: Any, command: str, **kwargs: Any) -> Any:
            reply = parse(connection, command, **kwargs)
            if command == "BRPOP" and reply:
                key, raw = reply
                problem = self._unreadable(raw)
                if problem is not None:
                    queue = bytes_to_str(key).rsplit(self.sep, 1)[0]  # type: ignore[no-untyped-call]
                    self._dead_letter(queue, raw, problem)
                    return None
            return reply

        client.parse_response = screened
        try:
            return super()._brpop_read(**options)  # type: ignore[no-untyped-call]
        finally:
            del client.parse_response

    def _unreadable(self, raw: bytes) -> str | None:
        """Why kombu could not make a message of ``raw``; ``None`` when it can."""
        try:
            # What kombu does with it next: the envelope as JSON, then its Message (which
            # decodes the body as the envelope says).
            payload = loads(raw.decode("utf-8"))  # type: ignore[no-untyped-call]
            self.Message(payload, channel=self)  # type: ignore[no-untyped-call]
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"[:1000]
        return None

    def _dead_letter(self, queue: str, raw: bytes, problem: str) -> None:
        shown = raw[:200]
        log.error("dead-lettered a malformed message from queue %s (%s): %r", queue, problem, shown)
        letter = json.dumps(
            {
                "queue": queue,
                "received_at": datetime.now(UTC).isoformat(),
                "error": problem,
                "raw": raw[:_RAW_KEPT].decode("utf-8", "replace"),
            }
        )
        try:
            with self.conn_or_acquire() as client:
                client.lpush(DEAD_LETTER_KEY, letter)
                client.ltrim(DEAD_LETTER_KEY, 0, DEAD_LETTER_MAX - 1)
        except Exception:
            # Logged above; the message itself is gone either way (it could never run).
            log.warning("could not keep the dead letter", exc_info=True)


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`ScreeningChannel`."""

    Channel = ScreeningChannel


# --- a broker that lost its contents ---------------------------------------------------------

#: Set in Redis by the reconciler; its absence means Redis lost everything it held.
MARKER_KEY = "szbench.broker_marker"


def broker_was_emptied(url: str) -> bool:
    """Whether the Redis at ``url`` lost its contents since the last call (anyone's).

    The reconciler calls this every pass. The marker it sets survives as long as Redis keeps
    its data, so finding it gone says directly that every message Redis held is gone (Redis
    restarted without persistence, or flushed), without waiting for idle workers to prove
    the queues empty. ``SET NX``: of several reconcilers only one sees it gone. Redis must
    not evict keys (``maxmemory-policy noeviction``, which Celery needs anyway), or an
    evicted marker would send work again that was still queued. Raises the client's
    connection errors when Redis is away.
    """
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
    try:
        return bool(client.set(MARKER_KEY, datetime.now(UTC).isoformat(), nx=True))
    finally:
        client.close()
