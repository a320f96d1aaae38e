"""A2A errors: one kind per error the specification names, each with its JSON-RPC
code, HTTP status and gRPC status (the table of its section 5.4), whatever the
transport or protocol version that answers with it.

Three modules are named `errors`: this one holds A2A's errors (the binding's);
`domain/errors.py` holds the service's own, which every transport maps (`from_service`,
here, to these kinds), and `api/errors.py` writes errors as REST's problem+json.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from taskservice.domain.errors import (
    BudgetExhausted,
    DatabaseUnavailable,
    NotFound,
    ServiceError,
)

DOMAIN = "a2a-protocol.org"
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


class Kind(Enum):
    """(JSON-RPC code, HTTP status, gRPC status, standard message)."""

    PARSE_ERROR = (-32700, 400, "INVALID_ARGUMENT", "Invalid JSON payload")
    INVALID_REQUEST = (-32600, 400, "INVALID_ARGUMENT", "Request payload validation error")
    METHOD_NOT_FOUND = (-32601, 404, "NOT_FOUND", "Method not found")
    INVALID_PARAMS = (-32602, 400, "INVALID_ARGUMENT", "Invalid parameters")
    INTERNAL_ERROR = (-32603, 500, "INTERNAL", "Internal error")
    # The database is down: JSON-RPC has only "internal error"; HTTP says 503.
    UNAVAILABLE = (-32603, 503, "UNAVAILABLE", "Service unavailable")
    # The tenant's spend budget is spent: JSON-RPC has no code for it either; HTTP
    # says 429, gRPC a quota's RESOURCE_EXHAUSTED.
    BUDGET_EXHAUSTED = (-32603, 429, "RESOURCE_EXHAUSTED", "Budget exhausted")
    TASK_NOT_FOUND = (-32001, 404, "NOT_FOUND", "Task not found")
    TASK_NOT_CANCELABLE = (-32002, 400, "FAILED_PRECONDITION", "Task cannot be canceled")
    PUSH_NOTIFICATION_NOT_SUPPORTED = (
        -32003,
        400,
        "FAILED_PRECONDITION",
        "Push Notification is not supported",
    )
    UNSUPPORTED_OPERATION = (-32004, 400, "FAILED_PRECONDITION", "This operation is not supported")
    CONTENT_TYPE_NOT_SUPPORTED = (
        -32005,
        400,
        "INVALID_ARGUMENT",
        "Incompatible content types",
    )
    INVALID_AGENT_RESPONSE = (-32006, 500, "INTERNAL", "Invalid agent response")
    EXTENDED_AGENT_CARD_NOT_CONFIGURED = (
        -32007,
        400,
        "FAILED_PRECONDITION",
        "Extended agent card is not configured",
    )
    EXTENSION_SUPPORT_REQUIRED = (
        -32008,
        400,
        "FAILED_PRECONDITION",
        "Extension support required",
    )
    VERSION_NOT_SUPPORTED = (-32009, 400, "FAILED_PRECONDITION", "Version not supported")

    @property
    def code(self) -> int:
        return int(self.value[0])

    @property
    def http_status(self) -> int:
        return int(self.value[1])

    @property
    def grpc_status(self) -> str:
        return str(self.value[2])

    @property
    def standard_message(self) -> str:
        return str(self.value[3])


class A2AError(Exception):
    """An A2A error: its kind, a message, what it concerns (`info`, shown as the
    ErrorInfo's metadata in 1.0 and as `data` in 0.3) and, for invalid parameters,
    which fields are wrong and why. `http_status` overrides the kind's where HTTP has
    a closer answer (a body that is not JSON is a 415; a forbidden one a 403)."""

    def __init__(
        self,
        kind: Kind,
        message: str | None = None,
        *,
        violations: list[tuple[tuple[str | int, ...], str]] | None = None,
        http_status: int | None = None,
        **info: Any,
    ) -> None:
        self.kind = kind
        self.message = message or kind.standard_message
        super().__init__(self.message)
        self.info = info
        self.violations = violations or []
        self.http_status = http_status or kind.http_status

    @property
    def code(self) -> int:
        return self.kind.code

    def data_v03(self) -> Any:
        """The 0.3 `data`: what it concerns, and the fields that are wrong."""
        data: dict[str, Any] = dict(self.info)
        if self.violations:
            data["errors"] = [{"loc": list(loc), "msg": msg} for loc, msg in self.violations]
        return data or None

    def details(self) -> list[dict[str, Any]]:
        """The 1.0 error details: an ErrorInfo naming the reason, and a BadRequest
        with the field violations when there are any."""
        metadata = {key: v if isinstance(v, str) else str(v) for key, v in self.info.items()}
        details: list[dict[str, Any]] = [
            {"@type": ERROR_INFO, "reason": self.kind.name, "domain": DOMAIN, "metadata": metadata}
        ]
        if self.violations:
            violations = [
                {"field": ".".join(map(str, loc)), "description": msg}
                for loc, msg in self.violations
            ]
            details.append({"@type": BAD_REQUEST, "fieldViolations": violations})
        return details

    def status(self) -> dict[str, Any]:
        """The HTTP+JSON error body: a `google.rpc.Status` (AIP-193) with the details."""
        return {
            "error": {
                "code": self.http_status,
                "status": self.kind.grpc_status,
                "message": self.message,
                "details": self.details(),
            }
        }


def from_service(exc: ServiceError) -> A2AError:
    """The A2A error for a refusal of the use cases."""
    info = {"detail": exc.detail, **exc.extensions}
    if isinstance(exc, NotFound):
        return A2AError(Kind.TASK_NOT_FOUND, **info)
    if isinstance(exc, DatabaseUnavailable):
        return A2AError(Kind.UNAVAILABLE, exc.detail, retryable=True)
    if isinstance(exc, BudgetExhausted):
        return A2AError(Kind.BUDGET_EXHAUSTED, exc.detail, type=exc.type, **exc.extensions)
    # Refused input (422), a conflicting retry (409), a body too large (413), a
    # forbidden request (403): invalid parameters, and on HTTP the same status.
    return A2AError(
        Kind.INVALID_PARAMS, exc.detail, http_status=_HTTP.get(exc.status), **exc.extensions
    )


_HTTP = {403: 403, 409: 409, 413: 413}  # HTTP statuses kept; the rest are a 400
