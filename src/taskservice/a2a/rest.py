"""The HTTP+JSON binding of A2A 1.0 (the specification's section 11): one operation
per resource and verb, below the base URL the agent card announces, each the 1.0
method of `a2a.methods` whose parameters it gathers from the path, the query (GET
and DELETE) or the JSON body (POST). Answers are ProtoJSON, as `application/a2a+json`
to a client that speaks it (`media_type`); errors a `google.rpc.Status` (AIP-193)
with the HTTP status of the specification's table and the same typed details as
JSON-RPC; streams are SSE whose events are StreamResponses, an error after the
stream began its last event, named `error`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from taskservice.a2a.errors import A2AError, Kind
from taskservice.a2a.methods import (
    Call,
    Events,
    call_unary,
    check_version,
    open_stream,
    requested_version,
)

MEDIA_TYPE = "application/a2a+json"
PLAIN_JSON = "application/json"
MEDIA_TYPES = (MEDIA_TYPE, PLAIN_JSON)


def media_type(content_type: str | None, accept: str | None) -> str:
    """The answer's media type: `application/a2a+json` (which the specification says
    the binding SHOULD use) for a client whose `Content-Type` or `Accept` names it,
    else `application/json`, which every HTTP client reads as JSON (curl, browsers,
    the conformance kit)."""
    asked = f"{content_type or ''},{accept or ''}".lower()
    return MEDIA_TYPE if MEDIA_TYPE in asked else PLAIN_JSON


VERSION_PARAMETER = "A2A-Version"  # may be sent as a query parameter instead of the header


@dataclass(frozen=True, slots=True)
class Operation:
    verb: str
    path: str  # below the interface's URL; `{name}` is a path parameter
    method: str  # the A2A method it is
    summary: str

    @property
    def takes_body(self) -> bool:
        return self.verb == "POST"

    @property
    def path_parameters(self) -> list[str]:
        return re.findall(r"{(\w+)}", self.path)


# In the order a router tries them: `:subscribe` and `:cancel` before `{id}`.
OPERATIONS = (
    Operation("POST", "/message:send", "SendMessage", "Send a message"),
    Operation("POST", "/message:stream", "SendStreamingMessage", "Send a message; follow its task"),
    Operation("POST", "/tasks/{id}:cancel", "CancelTask", "Cancel a task"),
    Operation("POST", "/tasks/{id}:subscribe", "SubscribeToTask", "Follow a task to its end"),
    Operation("GET", "/tasks/{id}:subscribe", "SubscribeToTask", "Follow a task to its end"),
    Operation(
        "POST",
        "/tasks/{taskId}/pushNotificationConfigs",
        "CreateTaskPushNotificationConfig",
        "Create a push notification config",
    ),
    Operation(
        "GET",
        "/tasks/{taskId}/pushNotificationConfigs",
        "ListTaskPushNotificationConfigs",
        "List a task's push notification configs",
    ),
    Operation(
        "GET",
        "/tasks/{taskId}/pushNotificationConfigs/{id}",
        "GetTaskPushNotificationConfig",
        "Get a push notification config",
    ),
    Operation(
        "DELETE",
        "/tasks/{taskId}/pushNotificationConfigs/{id}",
        "DeleteTaskPushNotificationConfig",
        "Delete a push notification config",
    ),
    Operation("GET", "/tasks/{id}", "GetTask", "Get a task"),
    Operation("GET", "/tasks", "ListTasks", "List tasks"),
    Operation("GET", "/extendedAgentCard", "GetExtendedAgentCard", "The extended agent card"),
)


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: Any


def _params(
    operation: Operation, path: dict[str, str], query: list[tuple[str, str]], body: bytes
) -> dict[str, Any]:
    """The method's parameters: the body's (POST) or the query's (GET, DELETE; a
    repeated name is a list), then the path's, which win."""
    gathered: dict[str, Any] = {}
    if operation.takes_body:
        if body.strip():
            try:
                sent = json.loads(body)
            except ValueError:
                raise A2AError(Kind.PARSE_ERROR) from None
            if not isinstance(sent, dict):
                raise A2AError(Kind.INVALID_REQUEST, "the body is a JSON object")
            gathered.update(sent)
    else:
        for name, value in query:
            if name == VERSION_PARAMETER:
                continue
            if name in gathered:
                before = gathered[name]
                gathered[name] = [*before, value] if isinstance(before, list) else [before, value]
            else:
                gathered[name] = value
    gathered.update(path)
    return gathered


async def respond(
    call: Call,
    operation: Operation,
    *,
    path: dict[str, str],
    query: list[tuple[str, str]],
    body: bytes,
    version: str | None,
) -> Answer | Events:
    """The operation's answer: a status and body (errors too), or the events of a
    stream whose start succeeded."""
    try:
        method = check_version(operation.method, requested_version(version))
        params = _params(operation, path, query, body)
        if method.unary is not None:
            result = await call_unary(method, call, params)
            return Answer(200, {} if result is None else result)
        return await open_stream(method, call, params)
    except A2AError as exc:
        return Answer(exc.http_status, exc.status())
