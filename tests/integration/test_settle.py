"""Waiting for a task's state (A2A's blocking send, `?wait=`, MCP's calls) from the
notices of its changes of state: no read of the event log, one read of the task at
the end, and no wait for the poll when the change came just before the wait began."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from taskservice.db.eventlog import EventLog
from taskservice.db.steps import LedgerStore
from taskservice.db.tasks import TaskStore
from taskservice.domain.models import Lease
from taskservice.domain.states import TaskState
from tests.conftest import ClientFactory, wait_for

A2A_1_0 = {"A2A-Version": "1.0"}


async def finish(store: TaskStore, task_id: uuid.UUID) -> None:
    """A worker's run, in short: claimed (running), then completed."""
    lease = Lease("test-worker", 1)
    running = await store.transition(
        task_id,
        source=TaskState.PENDING,
        target=TaskState.RUNNING,
        values={"lease_owner": lease.owner, "attempt": 1},
    )
    assert running is not None
    done = await store.transition(
        task_id,
        source=TaskState.RUNNING,
        target=TaskState.COMPLETED,
        lease=lease,
        values={"result": "ok"},
    )
    assert done is not None


@pytest.fixture
def no_log_reads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every read of the event log, failing the test's wait should it make one."""
    reads: list[Any] = []

    async def page(self: EventLog, *args: Any, **kwargs: Any) -> Any:
        reads.append(args)
        raise AssertionError("the wait read the event log")

    monkeypatch.setattr(EventLog, "page", page)
    return reads


async def test_a_wait_ends_on_the_notice_of_its_task_s_end(
    make_client: ClientFactory, store: TaskStore, no_log_reads: list[Any]
) -> None:
    async with make_client(stream_poll_seconds=30) as client:
        service = client.app.state.runtime.service  # type: ignore[attr-defined]
        created = (await client.post("/v1/tasks", json={"input": "x"})).json()
        task = await service.get(tenant="default", task_id=created["id"])
        waiting = asyncio.create_task(service.settle(task, 20))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        started = time.monotonic()
        await finish(store, task.id)
        settled = await asyncio.wait_for(waiting, 5)
    assert settled.state is TaskState.COMPLETED
    assert settled.result == "ok"
    assert time.monotonic() - started < 10  # the notice, not the 30 s poll
    assert no_log_reads == []


async def test_a_wait_that_begins_just_after_the_change_sees_it_at_once(
    make_client: ClientFactory, store: TaskStore, no_log_reads: list[Any]
) -> None:
    """The caller read the task pending; it completed before the wait began (a busy
    API process, a quick worker): the notices heard meanwhile say so."""
    async with make_client(stream_poll_seconds=30) as client:
        runtime = client.app.state.runtime  # type: ignore[attr-defined]
        created = (await client.post("/v1/tasks", json={"input": "x"})).json()
        stale = await runtime.service.get(tenant="default", task_id=created["id"])
        heard: list[str] = []
        runtime.hub.subscribe(lambda notice: heard.append(notice.target))
        await finish(store, stale.id)
        await wait_for(lambda: "completed" in heard)
        started = time.monotonic()
        settled = await runtime.service.settle(stale, 20)
    assert settled.state is TaskState.COMPLETED
    assert time.monotonic() - started < 10  # the notices heard, not the 30 s poll
    assert no_log_reads == []


async def test_a_blocking_a2a_send_reads_the_settled_task_with_its_messages(
    make_client: ClientFactory,
    store: TaskStore,
    no_log_reads: list[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One read at the end: the task and the messages of its answer's history."""
    ledger_reads: list[uuid.UUID] = []
    all_messages = LedgerStore.all_messages

    async def counted(self: LedgerStore, task_id: uuid.UUID) -> list[Any]:
        ledger_reads.append(task_id)
        return await all_messages(self, task_id)

    monkeypatch.setattr(LedgerStore, "all_messages", counted)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"role": "ROLE_USER", "messageId": "m-1", "parts": [{"text": "hi"}]}},
    }
    async with make_client(workers_enabled=True) as client:
        sent = (await client.post("/a2a", json=body, headers=A2A_1_0)).json()["result"]["task"]
        read_by_the_send = list(ledger_reads)
        get = {**body, "method": "GetTask", "params": {"id": sent["id"]}}
        got = (await client.post("/a2a", json=get, headers=A2A_1_0)).json()["result"]
        elsewhere = await store.get_with_messages(uuid.UUID(sent["id"]), tenant="someone-else")

    assert sent["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m["role"] for m in sent["history"]] == ["ROLE_USER", "ROLE_AGENT"]
    assert read_by_the_send == []
    assert sent["history"] == got["history"]  # as GetTask, which reads the ledger itself
    assert ledger_reads == [uuid.UUID(sent["id"])]
    assert elsewhere is None
    assert no_log_reads == []


async def test_a_blocking_send_asking_for_no_history_reads_no_messages(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[uuid.UUID] = []
    with_messages = TaskStore.get_with_messages

    async def counted(self: TaskStore, task_id: uuid.UUID, *, tenant: str) -> Any:
        reads.append(task_id)
        return await with_messages(self, task_id, tenant=tenant)

    monkeypatch.setattr(TaskStore, "get_with_messages", counted)
    message = {"role": "ROLE_USER", "messageId": "m-2", "parts": [{"text": "hi"}]}
    params = {"message": message, "configuration": {"historyLength": 0}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    async with make_client(workers_enabled=True) as client:
        sent = (await client.post("/a2a", json=body, headers=A2A_1_0)).json()["result"]["task"]

    assert sent["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "history" not in sent
    assert reads == []
