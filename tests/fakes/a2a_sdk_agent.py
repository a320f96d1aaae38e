"""An A2A agent built on the official SDK's server (not taskservice), on loopback:
an echo agent that answers `echo: <input>` as an artifact `delay` after it started
(or, with `chunk_delay`, writes it a word at a time, each word an appended chunk of
the artifact), and notes every message id it receives. Its card offers one
interface: JSON-RPC or HTTP+JSON, of A2A 1.0 or of 0.3 (the SDK's compatibility
layer), as asked, and says it streams (`SubscribeToTask`) when asked to."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from a2a.helpers.proto_helpers import new_data_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import Event, EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.routes.rest_routes import create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    SubscribeToTaskRequest,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette

from tests.fakes.loopback import free_port, served


@dataclass
class Echo(AgentExecutor):
    delay: float = 0.3  # seconds between starting and answering
    chunk_delay: float | None = None  # seconds between the answer's words (None: whole)
    data: bool = False  # answer with data, not text: {"echo": <input>, "words": <n>}
    received: list[str] = field(default_factory=list)  # message ids, in order

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        assert context.task_id is not None
        assert context.context_id is not None
        self.received.append(context.message.message_id)
        if context.current_task is None:
            submitted = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)
            await event_queue.enqueue_event(
                Task(
                    id=context.task_id,
                    context_id=context.context_id,
                    status=submitted,
                    history=[context.message],
                )
            )
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work()
        await asyncio.sleep(self.delay)
        answer = f"echo: {context.get_user_input()}"
        if self.data:
            echoed = {"echo": context.get_user_input(), "words": len(answer.split())}
            await updater.add_artifact([new_data_part(echoed)], name="answer")
        elif self.chunk_delay is None:
            await updater.add_artifact([Part(text=answer)], name="answer")
        else:
            words = answer.split(" ")
            for n, word in enumerate(words):
                chunk = [Part(text=word if n == 0 else f" {word}")]
                last = n == len(words) - 1
                await updater.add_artifact(
                    chunk, artifact_id="answer", name="answer", append=n > 0, last_chunk=last
                )
                await asyncio.sleep(self.chunk_delay)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        assert context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class Handler(DefaultRequestHandler):
    """The SDK's handler, counting the subscriptions to tasks it serves."""

    subscriptions = 0

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        self.subscriptions += 1
        async for event in super().on_subscribe_to_task(params, context):
            yield event


@dataclass
class SdkAgent:
    url: str
    echo: Echo
    handler: Handler


@asynccontextmanager
async def sdk_agent(
    version: str = "1.0",
    *,
    delay: float = 0.3,
    streaming: bool = False,
    chunk_delay: float | None = None,
    binding: str = "JSONRPC",
    data: bool = False,
) -> AsyncIterator[SdkAgent]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    path = "/rest" if binding == "HTTP+JSON" else "/a2a"
    interface = AgentInterface(
        url=f"{url}{path}", protocol_binding=binding, protocol_version=version
    )
    card = AgentCard(
        name="echo",
        description="Echoes its input",
        version="1.0.0",
        supported_interfaces=[interface],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="Echoes", tags=["echo"])],
    )
    echo = Echo(delay=delay, chunk_delay=chunk_delay, data=data)
    handler = Handler(agent_executor=echo, task_store=InMemoryTaskStore(), agent_card=card)
    compat = version == "0.3"
    if binding == "HTTP+JSON":
        routes = create_rest_routes(handler, enable_v0_3_compat=compat, path_prefix=path)
    else:  # JSON-RPC, whatever else the card says (a card offering what nobody serves)
        routes = create_jsonrpc_routes(handler, path, enable_v0_3_compat=compat)
    app = Starlette(routes=[*create_agent_card_routes(card), *routes])
    async with served(app, port):
        yield SdkAgent(url=url, echo=echo, handler=handler)
