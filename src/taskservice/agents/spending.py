"""Spend-checked models: `SpendCheckedModel` wraps every model a run may request
(the task's, and its profile's fallback) so that each request, streamed or not, is
checked against the run's budgets before it is sent (`common/spending.py`), and
settled with its real usage after the answer.

A profile's `fallback_model` is pydantic-ai's `FallbackModel` over both, falling
back on `BudgetExhausted` only: a request the task's model has no budget for goes
to the fallback, priced at the fallback's price, when that fits (`fallback_chain`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from taskservice.agents.budgeted import request_characters
from taskservice.common.rate_limits import estimate_tokens
from taskservice.common.spending import CURRENT_SPEND, BudgetExhausted, ModelCall


class SpendCheckedModel(WrapperModel):
    """A model whose requests reserve what they may cost in the budgets of the run in
    whose context they are made (`CURRENT_SPEND`; none: not checked). `name`: the
    model as tasks name it; `output_tokens`: the output bound of a request that sets
    no `max_tokens`."""

    def __init__(
        self, wrapped: Model | str, *, name: str, output_tokens: int, fallback: bool = False
    ) -> None:
        super().__init__(wrapped)
        self.name = name
        self.output_tokens = output_tokens
        self.fallback = fallback

    def _call(self) -> ModelCall:
        wrapped = self.wrapped
        return ModelCall(
            model=self.name,
            model_name=wrapped.model_name,
            provider=wrapped.system,
            provider_url=wrapped.base_url,
            fallback=self.fallback,
        )

    def _bound(self, model_settings: ModelSettings | None) -> int:
        """The most output tokens the request may take: its `max_tokens` setting, else
        the operator's default bound."""
        limit = (model_settings or {}).get("max_tokens")
        return int(limit) if limit else self.output_tokens

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        async with self._checked(messages, model_settings) as answered:
            response = await super().request(messages, model_settings, model_request_parameters)
            answered.append(response)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        async with self._checked(messages, model_settings) as answered:
            async with super().request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as stream:
                yield stream
            answered.append(stream.get())

    @asynccontextmanager
    async def _checked(
        self, messages: list[ModelMessage], model_settings: ModelSettings | None
    ) -> AsyncIterator[list[ModelResponse]]:
        """The request made in the block, checked by the run's gate first (none: not
        checked), and settled with the response the block appends (none, or an
        error: nothing was spent)."""
        gate = CURRENT_SPEND.get()
        if gate is None:
            yield []
            return
        call = self._call()
        reserved = await gate.reserve(
            call,
            input_tokens=estimate_tokens(request_characters(messages)),
            output_tokens=self._bound(model_settings),
        )
        answered: list[ModelResponse] = []
        try:
            yield answered
        except BaseException:
            await gate.settle(call, reserved, None)
            raise
        await gate.settle(call, reserved, answered[-1] if answered else None)


def _falls_back(exc: Exception) -> bool:
    return isinstance(exc, BudgetExhausted)


def fallback_chain(primary: SpendCheckedModel, fallback: SpendCheckedModel) -> FallbackModel:
    """The task's model, and the profile's fallback when a request to it would pass a
    budget (on nothing else: a provider's error is the task's model's to report)."""
    return FallbackModel(primary, fallback, fallback_on=_falls_back)
