"""Delegation: a task on an `a2a` profile (`agents/remote.py`) is run by a remote A2A
agent, spoken to with the official A2A SDK's client (the version and binding its
card says), and followed until it settles.

```
claim ─▶ message id in tasks.remote (fenced) ─▶ SendMessage (returnImmediately)
      ─▶ the remote task's id in tasks.remote ─▶ followed: SubscribeToTask when the
         card says the agent streams, else GetTask every 0.25 → 2 s (a `log` line
         for each state seen; the answer's chunks as live output) ─▶ GetTask ─▶ outcome
a later claim (the worker died, or was stopped) ─▶ the same remote task, followed again
```

Following by stream is how the task learns at once of what the remote does; what
it learns that way is never relied on: when the stream says the task settled (or
ends, or breaks), the task as GetTask gives it is what counts, and a stream that
breaks is opened again (an agent that refuses to stream it is polled instead). The
text of the answer's artifacts, as their chunks arrive, is this task's live output
(`live_output`: `delta` events of the response after the prompt, as a local model's
would be), the complete answer persisted as that response at the end.

The message id is written (with the time) before the message is sent, so a worker
that dies between the two is followed by one that looks for the task the send may
have created (`ListTasks`, where the remote can list) and otherwise sends the *same*
message again, which an A2A agent recognises as a retry (taskservice answers with
the task it created); once the remote answered, its task's id is written and every
later claim follows that task. The remote never gets the message twice as a new
task, unless it can neither list its tasks nor recognise a retry.

A remote task that asks for input makes this task ask the same question
(`input_required`, a question whose id names the remote task); the answer, given
here as to any question, is sent on to the remote task by the run that resumes,
once, and the following goes on. A remote asking for authentication fails the task.

Cancelling the task cancels the remote task (`CancelTask`, best effort, once the
run knows its id); a run stopped for any other reason (shutdown, a lost lease)
leaves it running, for the next claim to follow.

The remote's outcome becomes this task's: `completed` with its artifacts' text as
the result (their data, when they hold data and no text; else its final message's
text), the conversation recorded as for a local run;
`failed`, `rejected` or `canceled` as a failure carrying the remote's message. A
transport error is retried with backoff (the task's timeout bounds the whole
delegation); the card's URL and every URL called are checked like webhook targets
(`webhooks.targets`: https unless allowed, no internal address unless allow-listed),
and connected to only at the addresses checked (`webhooks.http.CheckedTransport`).
The calls and when they are tried again are in `remote_calls.py`; what a remote
task says (its texts, its result, the answer shown as it grows), in
`remote_answers.py`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, cast

import certifi
import httpx
from a2a.client import Client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
)
from a2a.types import Task as RemoteTask
from a2a.types import TaskState as RemoteState
from a2a.utils.errors import A2AError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.usage import RunUsage

from taskservice.agents.remote import RemoteAgent
from taskservice.domain.content import as_text
from taskservice.domain.models import Task
from taskservice.settings import Settings
from taskservice.webhooks.targets import AllowList, UnsafeTarget
from taskservice.worker.ledger import RunLedger
from taskservice.worker.live_output import LiveOutput
from taskservice.worker.outcomes import Completed, Ended, Failed, NeedsInput
from taskservice.worker.remote_answers import (
    Answer,
    answer_text,
    applied,
    content,
    result,
    state_name,
    status_text,
)
from taskservice.worker.remote_calls import (
    Link,
    RemoteError,
    collect,
    open_link,
    retried,
    set_deadline,
    unavailable,
)

log = logging.getLogger(__name__)

_FIRST_POLL = 0.25  # seconds; doubled after each poll that found it unsettled …
_LAST_POLL = 2.0  # … up to this
_CANCEL_SECONDS = 10.0  # for the remote to take a cancel
_FAILED = {
    RemoteState.TASK_STATE_FAILED: "remote_failed",
    RemoteState.TASK_STATE_REJECTED: "remote_rejected",
    RemoteState.TASK_STATE_CANCELED: "remote_cancelled",
}
# Where following stops: an end, or a wait for the client.
_SETTLED = {
    *_FAILED,
    RemoteState.TASK_STATE_COMPLETED,
    RemoteState.TASK_STATE_INPUT_REQUIRED,
    RemoteState.TASK_STATE_AUTH_REQUIRED,
}
# Looking for the task a message sent before created: the remote tasks updated
# since this long before it was sent (their clocks may differ from ours), at most
# this many pages of 100.
_CLOCK_SKEW = timedelta(minutes=5)
_LISTED_PAGES = 10
_LISTED_PAGE = 100
# Each task listed with its last this many messages, which the search reads: a
# server may list none unless asked (taskservice does; the SDK's lists them all). A
# task whose first message is further back than that is not found, and the message
# is sent again, for the remote to recognise as a retry.
_LISTED_HISTORY = 100
REMOTE_QUESTION = "remote_question"  # the `tool` of a question a remote agent asked


@dataclass(frozen=True, slots=True)
class _AnsweredAtOnce:
    """The remote answered the message with a message, not a task: its content."""

    result: Any


class Delegator:
    """Runs delegated tasks (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.allow = AllowList.parse(settings.webhook_allow_targets)
        self.allow_http = settings.webhook_allow_http
        # One for every delegation: loading the CAs costs milliseconds of CPU.
        self.ssl = ssl.create_default_context(cafile=certifi.where())
        self.task_timeout = settings.task_timeout_seconds

    async def run(
        self, task: Task, ledger: RunLedger, agent: RemoteAgent, live: LiveOutput | None = None
    ) -> Ended:
        """`live`: where the answer's chunks go as they arrive (None: nowhere)."""
        state = dict(task.remote or {})
        answer = Answer(live, position=ledger.position + 1)
        timeout = task.timeout_seconds or self.task_timeout
        set_deadline(timeout)
        try:
            async with open_link(
                agent, allow=self.allow, allow_http=self.allow_http, ssl_context=self.ssl
            ) as link:
                client = link.client
                remote = await self._remote_task(task, ledger, agent, client, state)
                if isinstance(remote, _AnsweredAtOnce):
                    return await self._completed(task, ledger, remote.result, answer)
                remote = await self._forward_answer(task, ledger, client, remote, state)
                try:
                    remote = await self._until_settled(ledger, link, remote, answer)
                except asyncio.CancelledError:
                    if ledger.cancelled:  # not a shutdown: the remote task goes too
                        await asyncio.shield(self._cancel(client, task, remote.id))
                    raise
        except (RemoteError, UnsafeTarget) as exc:
            return Failed({"type": "remote_unavailable", "message": str(exc)}, ledger.usage)
        settled = remote.status.state
        if settled == RemoteState.TASK_STATE_COMPLETED:
            return await self._completed(task, ledger, result(remote), answer)
        said = status_text(remote)
        if settled == RemoteState.TASK_STATE_INPUT_REQUIRED:
            return await self._ask(ledger, remote, state, said)
        if settled == RemoteState.TASK_STATE_AUTH_REQUIRED:
            message = (
                f"the remote agent's task {remote.id} asks for authentication"
                + (f" ({said})" if said else "")
                + ", which delegation cannot give"
            )
            return Failed({"type": "remote_auth_required", "message": message}, ledger.usage)
        error = {
            "type": _FAILED.get(settled, "remote_failed"),
            "message": f"the remote agent's task {remote.id} ended {state_name(settled)}"
            + (f": {said}" if said else ""),
            "remote_task_id": remote.id,
        }
        return Failed(error, ledger.usage)

    async def _ask(
        self, ledger: RunLedger, remote: RemoteTask, state: dict[str, Any], said: str
    ) -> NeedsInput:
        """The remote task asks a question: this task asks it (a question whose id
        names the remote task and how many answers it was given), and waits."""
        question = said or "The remote agent asks for more input."
        call_id = f"remote:{remote.id}:{state.get('answered', 0)}"
        await ledger.ask(call_id, REMOTE_QUESTION, question)
        state["question"] = call_id
        await ledger.note_remote(state, f"remote task {remote.id} asks: {question}")
        asked = {"id": call_id, "tool": REMOTE_QUESTION, "question": question}
        return NeedsInput({"kind": "questions", "questions": [asked]}, ledger.usage)

    async def _forward_answer(
        self,
        task: Task,
        ledger: RunLedger,
        client: Client,
        remote: RemoteTask,
        state: dict[str, Any],
    ) -> RemoteTask:
        """The answer to the remote task's question, sent on to it (once: a message
        id of its own, and only while the remote still waits for it)."""
        call_id = state.get("question")
        if call_id is None:
            return remote
        answer = await ledger.answer_to(call_id)
        if answer is None:
            return remote  # not answered (a run that stopped before the task waited)
        if remote.status.state == RemoteState.TASK_STATE_INPUT_REQUIRED:
            message = Message(
                message_id=f"{task.id}:{call_id}",
                task_id=remote.id,
                context_id=remote.context_id,
                role=Role.ROLE_USER,
                parts=[Part(text=answer)],
            )
            request = SendMessageRequest(message=message)
            request.configuration.return_immediately = True
            answers = await retried(partial(collect, client, request))
            remote = next((a.task for a in answers if a.HasField("task")), remote)
        del state["question"]
        state["answered"] = int(state.get("answered", 0)) + 1
        await ledger.note_remote(state, f"answer forwarded to remote task {remote.id}")
        return remote

    async def _remote_task(
        self,
        task: Task,
        ledger: RunLedger,
        agent: RemoteAgent,
        client: Client,
        state: dict[str, Any],
    ) -> RemoteTask | _AnsweredAtOnce:
        """The remote task this task was delegated to (sending the message unless a
        claim before this one got its id), or the remote's answer when it answered
        with a message and no task. `state` (the task's `remote`) is kept current."""
        if "task_id" in state:
            followed: RemoteTask = await retried(
                partial(client.get_task, GetTaskRequest(id=state["task_id"]))
            )
            return followed
        if "message_id" not in state:
            # Written before sending: a worker that dies after the send is followed
            # by one that looks for the task it created, or sends this same message.
            state.update(
                agent=agent.card_url,
                message_id=f"{task.id}:{ledger.lease.attempt}",
                sending_at=datetime.now(UTC).isoformat(),
            )
            await ledger.note_remote(state, f"delegating to the A2A agent at {agent.card_url}")
        elif (found := await self._sent_before(client, state)) is not None:
            state["task_id"] = found.id
            line = f"found remote task {found.id}, created by the message sent before"
            await ledger.note_remote(state, line)
            return found
        message = Message(
            message_id=state["message_id"],
            role=Role.ROLE_USER,
            parts=[Part(text=as_text(task.input))],
        )
        if agent.skill:
            message.metadata.update({"skill": agent.skill})
        request = SendMessageRequest(message=message)
        request.configuration.return_immediately = True
        answers = await retried(partial(collect, client, request))
        for answer in answers:
            if answer.HasField("task"):
                remote: RemoteTask = answer.task
                state["task_id"] = remote.id
                line = f"delegated to remote task {remote.id} ({state_name(remote.status.state)})"
                await ledger.note_remote(state, line)
                return remote
            if answer.HasField("message"):
                said = content([answer.message.parts])
                return _AnsweredAtOnce("" if said is None else said)
        raise RemoteError("the remote agent answered the message with neither a task nor a message")

    async def _sent_before(self, client: Client, state: dict[str, Any]) -> RemoteTask | None:
        """The remote task that a claim before this one created by sending the
        message, if the remote lists one (A2A 1.0 `ListTasks`: the tasks updated
        since a little before that send, with their history, searched for the
        message's id): a remote that does not recognise a resent `messageId` gets it
        once all the same. None when none is listed or the remote cannot list (0.3,
        a refusal): sent again. A remote unavailable for the search is tried again
        (`retried`), and should it stay so the task fails: a message is never sent
        again for want of a search."""
        if "sending_at" not in state:
            return None
        since = datetime.fromisoformat(state["sending_at"]) - _CLOCK_SKEW
        token = ""
        for _ in range(_LISTED_PAGES):
            request = ListTasksRequest(
                page_size=_LISTED_PAGE, page_token=token, history_length=_LISTED_HISTORY
            )
            request.status_timestamp_after.FromDatetime(since)
            try:
                page = await retried(partial(client.list_tasks, request))
            except RemoteError as exc:
                if exc.unavailable:
                    raise  # not sent again on a search that did not happen
                log.info("remote tasks not listed (%s): the message is sent again", exc)
                return None
            except NotImplementedError as exc:
                log.info("remote tasks not listed (%s): the message is sent again", exc)
                return None
            for listed in page.tasks:
                if any(m.message_id == state["message_id"] for m in listed.history):
                    # Read whole: a listing need not carry the answer (its artifacts).
                    found: RemoteTask = await retried(
                        partial(client.get_task, GetTaskRequest(id=listed.id))
                    )
                    return found
            token = page.next_page_token
            if not token:
                break
        return None

    async def _until_settled(
        self, ledger: RunLedger, link: Link, remote: RemoteTask, answer: Answer
    ) -> RemoteTask:
        """The remote task once it settled (ended, or waits for input), followed by
        stream when the agent streams, else polled; each state it is seen in on the
        way is a `log` line of this task, with its status message, and the answer's
        text is shown as it grows."""
        streams = link.streams
        delay = _FIRST_POLL
        seen = await self._seen(ledger, remote, None)
        while remote.status.state not in _SETTLED:
            if streams is not None:
                request = SubscribeToTaskRequest(id=remote.id)
                # An async generator (closed at once when the run is cancelled).
                stream = cast(AsyncGenerator[StreamResponse], streams.subscribe(request))
                try:
                    async with aclosing(stream) as events:
                        async for event in events:
                            remote = applied(remote, event)
                            seen = await self._seen(ledger, remote, seen)
                            answer.show(answer_text(remote))
                            if remote.status.state in _SETTLED:
                                break
                except (httpx.TransportError, A2AError) as exc:
                    if unavailable(exc) is None:  # refused, not unavailable for now
                        log.info("remote task %s: no stream (%s); polling it", remote.id, exc)
                        streams = None
            if remote.status.state not in _SETTLED:  # polled, or a stream ended or broke
                await asyncio.sleep(delay)
                delay = min(delay * 2, _LAST_POLL)
            # What counts: the task as the remote has it (a stream may have missed some).
            get = partial(link.client.get_task, GetTaskRequest(id=remote.id))
            remote = await retried(get)
            seen = await self._seen(ledger, remote, seen)
            answer.show(answer_text(remote))
        return remote

    async def _seen(
        self, ledger: RunLedger, remote: RemoteTask, seen: tuple[int, str] | None
    ) -> tuple[int, str]:
        """The remote task's state and status message, a `log` line when they are
        not `seen` (the last logged)."""
        status = (remote.status.state, status_text(remote))
        if status != seen:
            said = f": {status[1]}" if status[1] else ""
            await ledger.log("info", f"remote task {remote.id} is {state_name(status[0])}{said}")
        return status

    async def _cancel(self, client: Client, task: Task, remote_id: str) -> None:
        """Cancel the remote task of a task that was cancelled (best effort: the task
        is cancelled already, whatever the remote says)."""
        try:
            async with asyncio.timeout(_CANCEL_SECONDS):
                await client.cancel_task(CancelTaskRequest(id=remote_id))
        except (A2AError, httpx.HTTPError, TimeoutError) as exc:
            log.warning("task %s: remote task %s not cancelled: %s", task.id, remote_id, exc)
        else:
            log.info("task %s: cancelled; so is remote task %s", task.id, remote_id)

    async def _completed(
        self, task: Task, ledger: RunLedger, result: Any, answer: Answer
    ) -> Completed:
        """The remote's answer (a text, or data) as this task's result (its live
        output ended), and its conversation recorded as a local run's would be."""
        said = as_text(result)
        await answer.end(said)
        conversation: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart(as_text(task.input))]),
            ModelResponse(parts=[TextPart(said)], model_name=task.agent.model),
        ]
        # The remote agent's answer: no model request of ours, nothing to price.
        await ledger.sync(conversation, RunUsage(), final=True, priced=False)
        return Completed(result, ledger.usage)
