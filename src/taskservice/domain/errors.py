"""Domain errors raised by the use cases (and the layers below them); each transport maps
them to its own form (REST: application/problem+json; A2A: its error kinds).

Three modules are named `errors`: this one holds the errors themselves (the domain's);
`api/errors.py` writes them as problem+json (REST), and `a2a/errors.py` holds A2A's
error kinds, to which `a2a/errors.from_service` maps them.
"""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    status = 400
    title = "Bad request"
    type = "about:blank"

    def __init__(self, detail: str, **extensions: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extensions = extensions


class NotFound(ServiceError):
    status = 404
    title = "Not found"
    type = "https://taskservice.dev/problems/not-found"


class Conflict(ServiceError):
    status = 409
    title = "Conflict"
    type = "https://taskservice.dev/problems/conflict"


class InvalidRequest(ServiceError):
    status = 422
    title = "Invalid request"
    type = "https://taskservice.dev/problems/invalid-request"


class PayloadTooLarge(ServiceError):
    status = 413
    title = "Payload too large"
    type = "https://taskservice.dev/problems/payload-too-large"


class DatabaseUnavailable(ServiceError):
    """The database could not be reached, or the connection broke mid-request.

    Clients get one shape whatever the cause (`detail` below, `Retry-After`); the
    driver's words (`reason`) are for the log only. `unsent`: no connection could be
    had (refused, or every one busy), so the statement never reached the database
    and running it again cannot do anything twice."""

    status = 503
    title = "Service unavailable"
    type = "https://taskservice.dev/problems/database-unavailable"
    DETAIL = (
        "the database is unavailable; retry shortly (a retry with the same "
        "Idempotency-Key cannot create a duplicate)"
    )

    def __init__(self, reason: str, *, unsent: bool = False) -> None:
        super().__init__(self.DETAIL)
        self.reason = reason
        self.unsent = unsent

    def __str__(self) -> str:
        return self.reason


class BudgetExhausted(ServiceError):
    """A spend budget has nothing left this period: the request would spend from it
    (a submit of the tenant whose budget it is). `retry_after`: seconds until the
    period ends and the budget starts afresh."""

    status = 429
    title = "Budget exhausted"
    type = "https://taskservice.dev/problems/budget-exhausted"

    def __init__(self, detail: str, *, retry_after: int, **extensions: Any) -> None:
        super().__init__(detail, retry_after=retry_after, **extensions)
        self.retry_after = retry_after


class Unauthorized(ServiceError):
    status = 401
    title = "Unauthorized"
    type = "https://taskservice.dev/problems/unauthorized"


class Forbidden(ServiceError):
    """Authenticated, but these credentials do not cover this request."""

    status = 403
    title = "Forbidden"
    type = "https://taskservice.dev/problems/forbidden"
