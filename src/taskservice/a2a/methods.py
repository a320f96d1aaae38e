"""The A2A methods of both generations, whatever binding carries them: each reads
its parameters (a JSON object: a JSON-RPC request's `params`, or what an HTTP+JSON
route gathers from its path, query and body), acts through the handler and answers
in its version's shapes (`a2a.v03`, `a2a.v10`). The bindings (`a2a.jsonrpc`,
`a2a.rest`) only wrap requests and answers.

Versions: a request's `A2A-Version` names the version it speaks; a version this
agent does not speak, or one that is not the method's, is `VersionNotSupported`
(-32009). Without the header a 0.3 method is served as 0.3, as the specification
says, and a method only 1.0 has as 1.0: the generations share no method name (and
HTTP+JSON is 1.0's alone), so the method says which one the client speaks, and a
client that forgets the header (the 1.0 conformance kit does) is served rather than
refused.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from taskservice.a2a import v03, v10
from taskservice.a2a.errors import A2AError, Kind, from_service
from taskservice.a2a.handler import A2AHandler
from taskservice.a2a.push import PushConfigs
from taskservice.a2a.shapes import TaskId, TaskQuery, TaskUpdate, Update, ends_stream, params
from taskservice.domain.errors import ServiceError
from taskservice.domain.ids import decode_status_cursor
from taskservice.domain.models import StatusQuery

VERSIONS = (v10.VERSION, v03.VERSION)  # the versions spoken, preferred first
LIST_PAGE_SIZE = 50  # ListTasks without pageSize (at most 100)

Event = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Call:
    """What a method acts with: the caller's handler, and the card it may read."""

    handler: A2AHandler
    extended_card: Callable[[], Awaitable[dict[str, Any]]]


Unary = Callable[[Call, Any], Awaitable[Any]]
Events = AsyncGenerator[Event, None]
Streaming = Callable[[Call, Any], Awaitable[Events]]


@dataclass(frozen=True, slots=True)
class Method:
    version: str
    unary: Unary | None = None
    streaming: Streaming | None = None


def _pushes(call: Call) -> PushConfigs:
    return call.handler.pushes()


async def _push_create_10(call: Call, raw: Any) -> Any:
    config = params(v10.PushConfigIn, raw)
    if not config.task_id:
        raise A2AError(Kind.INVALID_PARAMS, violations=[(("taskId",), "Field required")])
    task_id, made = await _pushes(call).create(config.task_id, config.neutral())
    return v10.push_config(task_id, made)


async def _push_get_10(call: Call, raw: Any) -> Any:
    query = params(v10.PushConfigQuery, raw)
    return v10.push_config(*await _pushes(call).get(query.task_id, query.id))


async def _push_list_10(call: Call, raw: Any) -> Any:
    task_id, configs = await _pushes(call).list(params(v10.PushConfigList, raw).task_id)
    return {"configs": [v10.push_config(task_id, c) for c in configs], "nextPageToken": ""}


async def _push_delete_10(call: Call, raw: Any) -> Any:
    query = params(v10.PushConfigQuery, raw)
    await _pushes(call).delete(query.task_id, query.id)
    return {}


async def _push_set_03(call: Call, raw: Any) -> Any:
    sent = params(v03.PushConfigSet, raw)
    config = sent.push_notification_config.neutral()
    return v03.push_config(*await _pushes(call).create(sent.task_id, config))


async def _push_get_03(call: Call, raw: Any) -> Any:
    query = params(v03.PushConfigQuery, raw)
    return v03.push_config(*await _pushes(call).get(query.id, query.push_notification_config_id))


async def _push_list_03(call: Call, raw: Any) -> Any:
    task_id, configs = await _pushes(call).list(params(TaskId, raw).id)
    return [v03.push_config(task_id, c) for c in configs]


async def _push_delete_03(call: Call, raw: Any) -> Any:
    query = params(v03.PushConfigQuery, raw)
    await _pushes(call).delete(query.id, query.push_notification_config_id)
    return None


async def _card(call: Call, raw: Any) -> Any:
    return await call.extended_card()


# Each method, made for a version's wire shapes (`a2a.v03`, `a2a.v10`).


def _send(wire: ModuleType, wrap: str | None = None) -> Unary:
    async def send(call: Call, raw: Any) -> Any:
        answer = wire.task(await call.handler.send(wire.send_request(raw)))
        return {wrap: answer} if wrap else answer  # 1.0 wraps it: {"task": …}

    return send


def _get(wire: ModuleType) -> Unary:
    async def get(call: Call, raw: Any) -> Any:
        query = params(TaskQuery, raw)
        return wire.task(await call.handler.get(query.id, query.history_length))

    return get


def _cancel(wire: ModuleType) -> Unary:
    async def cancel(call: Call, raw: Any) -> Any:
        return wire.task(await call.handler.cancel(params(TaskId, raw).id))

    return cancel


def _stream(wire: ModuleType) -> Streaming:
    """Send a message, then follow its task until it ends or asks."""

    async def stream(call: Call, raw: Any) -> Events:
        request = wire.send_request(raw)
        task = await call.handler.deliver(request)
        length = request.history_length
        return _written(call.handler.updates(task, history_length=length, ends=ends_stream), wire)

    return stream


async def _list_10(call: Call, raw: Any) -> Any:
    query = params(v10.ListParams, raw)
    cursor = decode_status_cursor(query.page_token) if query.page_token else None
    state = v10.STATE_OF.get(query.status or "")
    where = StatusQuery(state, query.context_id, query.status_timestamp_after, cursor)
    size = query.page_size or LIST_PAGE_SIZE
    views, token, total = await call.handler.list_tasks(
        where, page_size=size, history_length=query.history_length
    )
    return v10.task_list(views, next_token=token, total=total, artifacts=query.include_artifacts)


async def _resubscribe_03(call: Call, raw: Any) -> Events:
    query = params(TaskQuery, raw)
    task = await call.handler.find(query.id)
    updates = call.handler.updates(task, history_length=query.history_length, ends=ends_stream)
    return _written(updates, v03)


async def _subscribe_10(call: Call, raw: Any) -> Events:
    task = await call.handler.subscribable(params(TaskId, raw).id)
    # A subscription lasts until the task is finished, through waits for input.
    updates = call.handler.updates(task, history_length=None, ends=lambda s: s.is_terminal)
    return _written(updates, v10)


async def _written(updates: AsyncIterator[Update], wire: ModuleType) -> Events:
    async for update in updates:
        final = isinstance(update, TaskUpdate) and ends_stream(update.state)
        for event in wire.events(update, final=final):
            yield event


METHODS: dict[str, Method] = {
    "message/send": Method(v03.VERSION, unary=_send(v03)),
    "message/stream": Method(v03.VERSION, streaming=_stream(v03)),
    "tasks/get": Method(v03.VERSION, unary=_get(v03)),
    "tasks/cancel": Method(v03.VERSION, unary=_cancel(v03)),
    "tasks/resubscribe": Method(v03.VERSION, streaming=_resubscribe_03),
    "tasks/pushNotificationConfig/set": Method(v03.VERSION, unary=_push_set_03),
    "tasks/pushNotificationConfig/get": Method(v03.VERSION, unary=_push_get_03),
    "tasks/pushNotificationConfig/list": Method(v03.VERSION, unary=_push_list_03),
    "tasks/pushNotificationConfig/delete": Method(v03.VERSION, unary=_push_delete_03),
    "agent/getAuthenticatedExtendedCard": Method(v03.VERSION, unary=_card),
    "SendMessage": Method(v10.VERSION, unary=_send(v10, wrap="task")),
    "SendStreamingMessage": Method(v10.VERSION, streaming=_stream(v10)),
    "GetTask": Method(v10.VERSION, unary=_get(v10)),
    "ListTasks": Method(v10.VERSION, unary=_list_10),
    "CancelTask": Method(v10.VERSION, unary=_cancel(v10)),
    "SubscribeToTask": Method(v10.VERSION, streaming=_subscribe_10),
    "CreateTaskPushNotificationConfig": Method(v10.VERSION, unary=_push_create_10),
    "GetTaskPushNotificationConfig": Method(v10.VERSION, unary=_push_get_10),
    "ListTaskPushNotificationConfigs": Method(v10.VERSION, unary=_push_list_10),
    "DeleteTaskPushNotificationConfig": Method(v10.VERSION, unary=_push_delete_10),
    "GetExtendedAgentCard": Method(v10.VERSION, unary=_card),
}
NAMES = sorted(METHODS)
_VERSION = re.compile(r"\s*(\d+)\.(\d+)(?:\.\d+)?\s*")


def requested_version(header: str | None) -> str | None:
    """The Major.Minor an `A2A-Version` value asks for (None when absent or empty),
    if this agent speaks it; else `VersionNotSupported`."""
    if header is None or not header.strip():
        return None
    match = _VERSION.fullmatch(header)
    version = f"{int(match[1])}.{int(match[2])}" if match else header
    if version not in VERSIONS:
        raise A2AError(
            Kind.VERSION_NOT_SUPPORTED,
            f"A2A-Version {header!r} is not supported; this agent speaks {', '.join(VERSIONS)}",
            supported=", ".join(VERSIONS),
        )
    return version


def check_version(name: str, asked: str | None) -> Method:
    """The method `name` (known), if the version asked for (None: any) is its own."""
    method = METHODS[name]
    if asked is not None and method.version != asked:
        raise A2AError(
            Kind.VERSION_NOT_SUPPORTED,
            f"{name} is an A2A {method.version} method; the request asks for A2A {asked} "
            f"(send the header A2A-Version: {method.version})",
            supported=", ".join(VERSIONS),
        )
    return method


def a2a_error(exc: A2AError | ServiceError) -> A2AError:
    return exc if isinstance(exc, A2AError) else from_service(exc)


async def call_unary(method: Method, call: Call, raw: Any) -> Any:
    """The method's answer; its refusals raised as `A2AError`."""
    assert method.unary is not None
    try:
        return await method.unary(call, raw)
    except ServiceError as exc:
        raise from_service(exc) from None


async def open_stream(method: Method, call: Call, raw: Any) -> Events:
    """The method's events, the first one already read: what refuses the request
    (bad parameters, an unknown task) is raised here, before a stream is opened,
    so that the binding answers it as a plain error. Later errors are raised by
    the iterator, and told in the stream."""
    assert method.streaming is not None
    try:
        events = await method.streaming(call, raw)
        first = await anext(events, None)
    except ServiceError as exc:
        raise from_service(exc) from None
    return _starting(first, events)


async def _starting(first: Event | None, events: Events) -> Events:
    async with aclosing(events):
        if first is None:
            return
        yield first
        try:
            async for event in events:
                yield event
        except ServiceError as exc:
            raise from_service(exc) from None
