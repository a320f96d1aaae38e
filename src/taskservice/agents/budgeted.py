"""Rate-limited models: `BudgetedModel` wraps the model of a spec whose model or
provider has rate limit budgets (`common.rate_limits`), so that each of its requests
waits for a slot of the run's gate, and a 429 gives the slot back and blocks the
budgets for the provider's Retry-After (which `model_client.ModelRequestLog`
notes).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage

from taskservice.common.rate_limits import (
    CURRENT_GATE,
    REQUEST_BUDGETED,
    ModelGate,
    estimate_tokens,
)


def request_characters(messages: list[ModelMessage]) -> int:
    """The text a request sends, roughly: its messages' contents and tool arguments."""
    total = 0
    for message in messages:
        for part in message.parts:
            for value in (getattr(part, "content", None), getattr(part, "args", None)):
                if value is not None:
                    total += len(value) if isinstance(value, str) else len(str(value))
    return total


def _tokens_used(usage: RequestUsage) -> int:
    return int(usage.input_tokens or 0) + int(usage.output_tokens or 0)


class BudgetedModel(WrapperModel):
    """A model whose requests draw from the rate limit budgets `keys`
    (`common/rate_limits.py`), through the gate of the run in whose context they are made
    (`CURRENT_GATE`; none: not limited, as outside a worker)."""

    def __init__(self, wrapped: Model | str, keys: tuple[str, ...]) -> None:
        super().__init__(wrapped)
        self.keys = keys

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        gate = CURRENT_GATE.get()
        if gate is None:
            return await super().request(messages, model_settings, model_request_parameters)
        async with self._slot(gate, messages) as reserved:
            response = await super().request(messages, model_settings, model_request_parameters)
        await gate.settle(self.keys, reserved, _tokens_used(response.usage))
        return response

    @asynccontextmanager
    async def _slot(self, gate: ModelGate, messages: list[ModelMessage]) -> AsyncIterator[int]:
        """A slot for the request made in the block (yields the tokens reserved for
        it). A 429 from the provider gives its tokens back, blocks the budgets for its
        Retry-After (the model client's hook notes it, and keeps the SDK from retrying
        in place), and raises `Throttled`: the task waits for a new slot."""
        reserved = await gate.acquire(self.keys, estimate_tokens(request_characters(messages)))
        refusal: list[float | None] = []
        token = REQUEST_BUDGETED.set(refusal)
        try:
            yield reserved
        except ModelHTTPError as exc:
            if exc.status_code == 429:
                await gate.settle(self.keys, reserved, 0)
                await gate.refused(self.keys, refusal[-1] if refusal else None)
            raise
        finally:
            REQUEST_BUDGETED.reset(token)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        gate = CURRENT_GATE.get()
        if gate is None:
            async with super().request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as stream:
                yield stream
            return
        async with (
            self._slot(gate, messages) as reserved,
            super().request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as stream,
        ):
            yield stream
        await gate.settle(self.keys, reserved, _tokens_used(stream.usage))
