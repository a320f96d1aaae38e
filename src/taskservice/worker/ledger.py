"""A run's step ledger: persists each complete message, tool call and step event as
the agent makes progress, and rebuilds the conversation to resume a run.

Follow-up messages queued for the task (`usecases/inbox.TaskInbox`) are handed to the run as
user messages (`deliver`), which the model reads at its next request; the write
that records such a message also counts it as read (`tasks.followups_read`), so a
run that stops first leaves it for the next one to deliver.

Resuming (after input arrived, or after a worker died) continues the persisted
conversation, the tool calls the last model response asked for settled from the
ledger (`resume.py`: what is settled how, and the `log` lines that say so).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    ToolCallPart,
)
from pydantic_ai.run import AgentRun
from pydantic_ai.tools import DeferredToolResults

from taskservice.agents.tools import LogLevel, RunHooks
from taskservice.common.metrics import MODEL_COST, MODEL_REQUESTS, MODEL_TOKENS, MODEL_UNPRICED
from taskservice.common.pricing import Pricing, Spend
from taskservice.db import retried, unsent
from taskservice.db.steps import Finished, LedgerStore
from taskservice.domain.models import Lease, Task
from taskservice.domain.states import TaskState
from taskservice.usecases.inbox import TaskInbox
from taskservice.usecases.tasks import TaskService
from taskservice.worker.resume import INTERRUPTED, resumed, settled
from taskservice.worker.turns import (
    complete_turns,
    followup_request,
    open_tool_calls,
    preview,
    read_in,
    summary,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

# The counts of a task's `usage` (beside its cost: `common/pricing.Spend`).
_COUNTS = ("input_tokens", "output_tokens", "requests")

# A task's event_seq when its first claim has just written `running`: 1 `pending`, 2
# `running`.
_FIRST_CLAIM_SEQ = 2


def _merge(
    staged: dict[str, list[dict[str, Any]]] | None, rows: dict[str, list[dict[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    if staged is None:
        return rows
    return {key: staged[key] + rows[key] for key in rows}


class LeaseLost(Exception):
    """The task is no longer this worker's: stop the run and write nothing more."""


class RunLedger(RunHooks):
    """The worker's adapter of the `RunHooks` port (`agents/tools.RunHooks`, what tools
    call): one run's ledger, written through fenced statements."""

    def __init__(
        self,
        store: LedgerStore,
        service: TaskService,
        inbox: TaskInbox,
        task: Task,
        lease: Lease,
        *,
        patience: float = 0.0,
        pricing: Pricing | None = None,
    ) -> None:
        self.store = store
        self.pricing = pricing or Pricing()
        # How long a statement waits for a connection while the database refuses
        # them (`_patiently`).
        self.patience = patience
        self.service = service  # subtasks are created as any task is
        self.inbox = inbox  # the follow-ups handed to the run
        self.task = task
        self.lease = lease
        self.position = 0  # of the next message to persist
        self.base_usage = {k: int(v) for k, v in (task.usage or {}).items() if k in _COUNTS}
        # What the task's requests cost: each model response priced once, as the run
        # receives it (`_price`), added to what the runs before it cost. A fork's
        # copied messages were its source's, and are not priced again.
        self.spend = Spend.of(task.usage)
        self.priced = 0  # the messages of the run before this one are priced
        self.usage: dict[str, Any] = dict(task.usage or {})
        # The last rows of the run, written with its outcome (`finish`).
        self.staged: dict[str, list[dict[str, Any]]] | None = None
        self.staged_read = 0  # the highest follow-up in what is staged
        # Follow-ups: how many the ledger holds as read, the highest handed to the
        # run, and whether more may be queued (told by the event hub: `tell`).
        self.read = task.followups_read
        self.handed = task.followups_read
        self.mail = task.unread > 0
        # The conversation so far, when the run goes on after it ended (follow-ups
        # arrived as it completed): what `resume_state` would have to rebuild.
        self.conversation: list[ModelMessage] | None = None
        # The run is stopped because the task was cancelled (not a shutdown or a lost
        # lease): a remote task it delegated to is cancelled too.
        self.cancelled = False
        # The task was paused (`pause`): the run stops once no tool call is in flight.
        self.pausing = False
        self._stop: Callable[[], None] | None = None
        self._in_flight: set[str] = set()  # tool calls started and not yet recorded

    def _check(self, written: bool) -> None:
        if not written:
            raise LeaseLost(str(self.task.id))

    async def _patiently(self, call: Callable[[], Awaitable[T]]) -> T:
        """A ledger statement, tried again for up to `patience` seconds while no
        connection can be had (the database refuses new ones, every one is busy): it
        never reached the database, so nothing is written twice, and the run goes on
        where it was instead of stopping and being redone from the ledger. A fault
        mid-statement (it may have committed) stops the run as before."""
        return await retried(
            call, where=f"task {self.task.id} ledger", within=self.patience, when=unsent
        )

    # -- resume -----------------------------------------------------------------

    async def resume_state(self) -> tuple[list[ModelMessage], DeferredToolResults | None]:
        """The conversation to go on from, and the settled results of the tool calls
        its last response asked for; says in `log` lines why and how it resumes."""
        if self.conversation is not None:  # the run goes on in memory, with follow-ups
            self.base_usage = {k: self.usage.get(k, 0) for k in _COUNTS}  # the runs before it
            self.mail = True
            return self.conversation, None
        if self.task.attempt == 1 and self.task.event_seq == _FIRST_CLAIM_SEQ + self.task.followups:
            # Its only events are its creation, the follow-ups queued while it was
            # pending and this claim: no run has written a message, a tool call or
            # anything else to resume from. (Every such write adds an event, so this
            # never skips a history that exists; a fork's copied ledger came with a
            # `log` line.)
            return [], None
        rows = await self._patiently(lambda: self.store.all_messages(self.task.id))
        history = ModelMessagesTypeAdapter.validate_python([row["message"] for row in rows])
        self.position = self.priced = len(history)
        cause = await self._patiently(
            lambda: self.store.resume_cause(self.task.id, claim_seq=self.task.event_seq)
        )
        lines = [resumed(self.task.attempt, cause, len(history), forked_from=self.task.forked_from)]
        pending = open_tool_calls(history)
        calls = await self._patiently(lambda: self.store.all_calls(self.task.id)) if pending else {}
        results, approvals, interrupted, said = settled(pending, calls)
        lines += said
        await self._write([self.store.log_event(level, message) for level, message in lines])
        for part in interrupted:
            await self._call(
                part.tool_call_id, part.tool_name, part.args, "failed", error=INTERRUPTED
            )
        if not results and not approvals:
            return history, None
        return history, DeferredToolResults(calls=results, approvals=approvals)

    # -- follow-ups -------------------------------------------------------------

    def tell(self) -> None:
        """More follow-ups may be queued (the event hub saw one): look at the next
        `deliver`."""
        self.mail = True

    async def deliver(self, run: AgentRun[Any, Any]) -> None:
        """Hand the run the follow-ups queued since the last it was handed: the
        model reads them at its next request (or, were the run about to end, the run
        goes on with them)."""
        if not self.mail:
            return
        self.mail = False
        followups = await self._patiently(lambda: self.inbox.after(self.task.id, self.handed))
        for followup in followups:
            run.enqueue(followup_request(followup))
            self.handed = followup.seq

    # -- progress ---------------------------------------------------------------

    async def sync(
        self,
        messages: list[ModelMessage],
        run_usage: Any,
        *,
        final: bool = False,
        priced: bool = True,
    ) -> None:
        """Persist the complete messages not yet in the ledger, in one statement.

        A request is written together with the response that answers it (one write
        per model turn, not two), so until `final` a trailing request waits; so does
        a trailing response that calls no tool (an answer: the run is about to end,
        or to ask again). `final` writes nothing: what is left is staged for
        `finish`, which writes it with the run's outcome in one statement. Nothing is
        lost if the run stops in between: a resumed run rebuilds the request from
        what the ledger has (the prompt, or the recorded results of the tool calls
        the last response asked for) and asks the model again.

        Each model response is priced as it arrives (not as it is written), so the
        cost shown goes with the tokens shown; `priced=False`: the responses are no
        model requests of this service's (a remote agent's answer, recorded).
        """
        self._price(messages, priced=priced)
        self.usage = {
            "input_tokens": self.base_usage.get("input_tokens", 0)
            + int(run_usage.input_tokens or 0),
            "output_tokens": self.base_usage.get("output_tokens", 0)
            + int(run_usage.output_tokens or 0),
            "requests": self.base_usage.get("requests", 0) + int(run_usage.requests or 0),
            **self.spend.shown(),
        }
        new = messages[self.position :]
        if not final:
            new = complete_turns(new)
        if not new:
            return
        rows = self._rows(new)
        self.position += len(new)
        self.staged = _merge(self.staged, rows)
        self.staged_read = max(self.staged_read, read_in(new))
        if final:
            return
        # What the last run staged, if it went on (follow-ups arrived as it ended),
        # is written first.
        rows, self.staged = self.staged, None
        read = max(self.read, self.staged_read)
        self._check(
            await self._patiently(
                lambda: self.store.append_messages(
                    self.task.id, lease=self.lease, usage=self.usage, read=read, **rows
                )
            )
        )
        self.read = read

    def _price(self, messages: list[ModelMessage], *, priced: bool) -> None:
        """Price the responses the run received since the last call, each once."""
        fresh, self.priced = messages[self.priced :], max(self.priced, len(messages))
        if not priced:
            return
        agent = self.task.agent
        for message in fresh:
            if not isinstance(message, ModelResponse):
                continue
            if message.state == "interrupted" and not message.usage.has_values():
                continue  # refused or cut off before any usage: not a request it counts
            price = self.pricing.price(
                message.usage,
                model=agent.model,
                model_name=message.model_name,
                provider=message.provider_name,
                provider_url=message.provider_url,
                at=message.timestamp,
            )
            self.spend.add(price)
            if price is None:
                MODEL_UNPRICED.labels(agent.profile, agent.model).inc()
            else:
                MODEL_COST.labels(agent.profile, agent.model).inc(float(price))

    def _rows(self, new: list[ModelMessage]) -> dict[str, list[dict[str, Any]]]:
        """The ledger rows of `new` (messages, their tool calls, their events)."""
        encoded = ModelMessagesTypeAdapter.dump_python(new, mode="json")
        rows: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        for position, (message, body) in enumerate(zip(new, encoded, strict=True), self.position):
            rows.append({"position": position, "kind": message.kind, "message": body})
            data = {"position": position, "kind": message.kind, "parts": summary(message)}
            events.append({"type": "message", "data": data})
            if isinstance(message, ModelResponse):
                _count(self.task.agent.profile, self.task.agent.model, message)
                events.append({"type": "usage", "data": dict(self.usage)})
                calls += [
                    {
                        "id": part.tool_call_id,
                        "name": part.tool_name,
                        "arguments": part.args_as_dict(),
                    }
                    for part in message.parts
                    if isinstance(part, ToolCallPart)
                ]
        return {"messages": rows, "calls": calls, "events": events}

    async def finish(self, target: TaskState, values: dict[str, Any]) -> Finished:
        """Write the run's outcome (`running` → `target`, with `values`) together
        with what `sync(final=True)` staged. Not written when the task is no longer
        ours (`LOST`) or, completing, it has follow-ups the run has not read
        (`UNREAD`: the staged rows stay, for the run that goes on)."""
        staged = self.staged or {"messages": [], "calls": [], "events": []}
        read = max(self.read, self.staged_read)
        finished = await self.store.finish(
            self.task.id, lease=self.lease, target=target, values=values, read=read, **staged
        )
        if finished is not Finished.UNREAD:
            self.staged = None  # only now: a failed write is retried with the same rows
        return finished

    async def _call(
        self,
        call_id: str,
        name: str,
        arguments: Any,
        status: str,
        *,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        kind = "tool_result" if status in ("completed", "failed") else "tool_call"
        data: dict[str, Any] = {"tool_call_id": call_id, "name": name, "status": status}
        if kind == "tool_call":
            data["arguments"] = arguments
        elif error is not None:
            data["error"] = error
        else:
            data["result"] = preview(result)
        self._check(
            await self._patiently(
                lambda: self.store.update_call(
                    self.task.id,
                    lease=self.lease,
                    call_id=call_id,
                    name=name,
                    arguments=arguments,
                    status=status,
                    result=result,
                    error=error,
                    event={"type": kind, "data": data},
                )
            )
        )

    # -- pausing ----------------------------------------------------------------

    def pause(self, stop: Callable[[], None]) -> None:
        """The task was paused: `stop` the run now, or, with tool calls in flight,
        as soon as the last of them is recorded (a model request in flight is
        abandoned as a crash abandons it; a tool call is never cut short). A call
        that would start from now on does not: it runs when the task is resumed."""
        if self.pausing:
            return
        self.pausing = True
        self._stop = stop
        if not self._in_flight:
            self._stopping()

    def unpause(self) -> None:
        """The task was resumed before its run stopped (a tool call still in
        flight): the run goes on as if it had not been paused."""
        if self.pausing and self._stop is not None:
            self.pausing = False
            self._stop = None

    def _stopping(self) -> None:
        stop, self._stop = self._stop, None  # once: from now on the run is stopping
        if stop is not None:
            stop()

    def _settled(self, call_id: str) -> None:
        self._in_flight.discard(call_id)
        if not self._in_flight:
            self._stopping()

    # -- RunHooks ---------------------------------------------------------------

    async def tool_started(self, call_id: str, name: str, arguments: Any) -> None:
        if self.pausing:  # not begun: the run resumed after the pause makes this call
            raise asyncio.CancelledError
        self._in_flight.add(call_id)
        try:
            await self._call(call_id, name, arguments, "in_progress")
        except BaseException:
            self._settled(call_id)
            raise

    async def tool_finished(
        self,
        call_id: str,
        name: str,
        arguments: Any,
        *,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        status = "failed" if error is not None else "completed"
        try:
            await self._call(call_id, name, arguments, status, result=result, error=error)
        finally:
            self._settled(call_id)

    async def tool_deferred(self, call_id: str, name: str, arguments: Any) -> None:
        try:
            await self._call(call_id, name, arguments, "pending")
        finally:
            self._settled(call_id)

    async def spawn(
        self,
        call_id: str,
        input: str,
        system_prompt: str | None,
        detached: bool = False,
        profile: str | None = None,
    ) -> str:
        child = await self.service.spawn(
            self.task,
            call_id=call_id,
            input=input,
            system_prompt=system_prompt,
            detached=detached,
            profile=profile,
        )
        on = f" on agent {profile}" if profile else ""
        await self.log("info", f"spawned {'detached ' * detached}subtask {child.id}{on}")
        return str(child.id)

    async def subtasks(self) -> list[dict[str, Any]] | None:
        rows = await self._patiently(lambda: self.store.children(self.task.id))
        if any(not TaskState(row["state"]).is_terminal for row in rows):
            return None
        return [
            {
                "id": str(r["id"]),
                "state": r["state"],
                "result": r["result"],
                "error": r["error"],
                "call": r["call"],  # the tool call that spawned it
            }
            for r in rows
        ]

    async def progress(self, percent: float, note: str) -> None:
        await self._write([{"type": "progress", "data": {"percent": percent, "note": note}}])

    async def log(self, level: LogLevel, message: str) -> None:
        await self._write([self.store.log_event(level, message)])

    def stage_log(self, level: LogLevel, message: str) -> None:
        """A `log` line written with the run's outcome (`finish`)."""
        self.staged = _merge(
            self.staged,
            {"messages": [], "calls": [], "events": [self.store.log_event(level, message)]},
        )

    async def ask(self, call_id: str, name: str, question: str) -> None:
        """A question for a person that no model asked (a remote agent's, relayed):
        a pending call, which the answer completes
        (`usecases/inbox.TaskInbox.answer`)."""
        await self._call(call_id, name, {"question": question}, "pending")

    async def answer_to(self, call_id: str) -> str | None:
        """The answer given to the question `call_id` (None: not answered)."""
        row = (await self._patiently(lambda: self.store.all_calls(self.task.id))).get(call_id)
        if row is None or row["status"] != "completed":
            return None
        return str(row["result"])

    async def note_remote(self, remote: dict[str, Any], line: str) -> None:
        """Record where the task stands on the remote agent it was delegated to
        (`Task.remote`), with an `info` line saying so."""
        events = [self.store.log_event("info", line)]
        written = await self._patiently(
            lambda: self.store.note_remote(
                self.task.id, lease=self.lease, remote=remote, events=events
            )
        )
        self._check(written)

    async def _write(self, events: list[dict[str, Any]]) -> None:
        self._check(
            await self._patiently(
                lambda: self.store.append_events(self.task.id, lease=self.lease, events=events)
            )
        )


def _count(agent: str, model: str, response: ModelResponse) -> None:
    """A model response, into the metrics (by the task's profile and model: an
    allowed name, not the provider's dated one)."""
    MODEL_REQUESTS.labels(agent, model).inc()
    MODEL_TOKENS.labels(agent, model, "input").inc(response.usage.input_tokens or 0)
    MODEL_TOKENS.labels(agent, model, "output").inc(response.usage.output_tokens or 0)
