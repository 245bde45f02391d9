"""The project's own errors. Services raise these; one handler renders them for HTTP.

Each error carries a message that is safe to show to the caller: it never contains a
host path, a hidden recording or another user's data.
"""

from __future__ import annotations


class SzbenchError(Exception):
    """Base of every error a service may raise on purpose."""

    status_code: int = 400

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    @property
    def name(self) -> str:
        return type(self).__name__


class BadRequest(SzbenchError):
    status_code = 400


class Unauthorized(SzbenchError):
    status_code = 401


class Forbidden(SzbenchError):
    status_code = 403


class NotFound(SzbenchError):
    status_code = 404


class Conflict(SzbenchError):
    status_code = 409


class InvalidSubmission(SzbenchError):
    """The submitter's algorithm or upload is unusable (their fault, shown to them)."""

    status_code = 422


class PayloadTooLarge(SzbenchError):
    status_code = 413


class QuotaExceeded(SzbenchError):
    status_code = 429


class ServiceUnavailable(SzbenchError):
    """A part of the deployment the request needs (the image registry) does not answer: not
    the caller's fault, and trying again later may work."""

    status_code = 503


class TooManyAttempts(SzbenchError):
    """Too many failed sign-ins: try again after ``retry_after_s`` (the Retry-After header)."""

    status_code = 429

    def __init__(self, detail: str, *, retry_after_s: int) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s
