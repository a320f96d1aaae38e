"""What model requests cost: each model response's usage priced in USD by
`genai-prices` (the providers' current and historical prices, cached tokens and
tiers), or by the operator's own prices (`TASKSERVICE_MODEL_PRICES`) for models it
does not know or that the operator prices otherwise.

A response that neither prices is *unpriced*: counted as such, never as free. Money
is `Decimal` throughout (genai-prices' own figures, summed exactly: no float drift);
a task's `usage` shows it as a decimal string (`Spend.shown`).

Here rather than in `agents/`: it reads a response's usage by its attributes (as
genai-prices does: `input_tokens`, `cache_read_tokens`, `output_tokens`, …), so it
needs no pydantic-ai, and settings check the operator's prices with it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from genai_prices import calc_price
from genai_prices.data_snapshot import get_snapshot
from genai_prices.types import ModelPrice
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

CURRENCY = "USD"


class PriceSetting(BaseModel):
    """An operator's price of a model, in USD per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: Decimal = Field(ge=0, allow_inf_nan=False)
    output: Decimal = Field(ge=0, allow_inf_nan=False)
    # Input tokens read from the provider's cache; unset: as other input tokens.
    cached_input: Decimal | None = Field(default=None, ge=0, allow_inf_nan=False)

    def model_price(self) -> ModelPrice:
        cached = self.input if self.cached_input is None else self.cached_input
        # Tokens written to a cache (Anthropic's) cost what input does: never nothing.
        return ModelPrice(
            input_mtok=self.input,
            output_mtok=self.output,
            cache_read_mtok=cached,
            cache_write_mtok=self.input,
        )


def parse_model_prices(text: str) -> dict[str, PriceSetting]:
    """`{"openai-chat:my-llama": {"input": 0.2, "output": 0.6, "cached_input": 0.05}}`
    as prices by model; ValueError saying what is wrong."""
    try:
        data = json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as exc:
        raise ValueError(f"model prices are not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(
            "model prices: expected a JSON object of model → prices, e.g. "
            '{"openai-chat:my-llama": {"input": 0.2, "output": 0.6}} (USD per million tokens)'
        )
    prices: dict[str, PriceSetting] = {}
    for model, price in data.items():
        if not model.strip():
            raise ValueError("model prices: a model name is empty")
        try:
            prices[model] = PriceSetting.model_validate(price)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'value'}: {error['msg']}"
                for error in exc.errors()
            )
            raise ValueError(
                f"model prices of {model!r}: {problems} (expected input, output and optionally "
                "cached_input, in USD per million tokens)"
            ) from None
    return prices


class Pricing:
    """Prices model responses: the operator's price of the task's model (or of the
    model the response names) first, else genai-prices' for the provider and model
    the response names, at the response's time."""

    def __init__(self, overrides: Mapping[str, PriceSetting] | None = None) -> None:
        self._overrides = {model: price.model_price() for model, price in (overrides or {}).items()}

    @staticmethod
    def preload() -> None:
        """Load genai-prices' data now (a one-time cost kept off a run's first
        response)."""
        get_snapshot()

    def price(
        self,
        usage: Any,
        *,
        model: str,
        model_name: str | None,
        provider: str | None = None,
        provider_url: str | None = None,
        at: datetime | None = None,
    ) -> Decimal | None:
        """The USD price of one response's `usage` (None: unpriced). `model` is the
        task's model (`openai-chat:gpt-4o`), `model_name` the one the response names
        (the provider's, often dated), `provider` and `provider_url` whom it came
        from."""
        override = self._overrides.get(model)
        if override is None and model_name:
            override = self._overrides.get(model_name)
        if override is not None:
            total: Decimal = override.calc_price(usage)["total_price"]
            return total
        if not model_name:
            return None
        # The API's address names a provider best (a gateway reselling models);
        # else its name; else genai-prices finds the model's provider by its name.
        lookups: list[tuple[str | None, str | None]] = [(provider, None)]
        if provider_url:
            lookups.insert(0, (None, provider_url))
        for provider_id, api_url in lookups:
            try:
                if api_url is not None:
                    found = calc_price(
                        usage, model_name, provider_api_url=api_url, genai_request_timestamp=at
                    )
                else:
                    found = calc_price(
                        usage, model_name, provider_id=provider_id, genai_request_timestamp=at
                    )
            except LookupError:  # a provider or model it does not know
                continue
            except ValueError:  # usage it cannot price (e.g. more cached than input)
                return None
            return found.total_price
        return None

    def response(self, response: Any, *, model: str) -> Decimal | None:
        """The price of a model response (pydantic-ai's `ModelResponse`: its usage,
        the model and provider it names, its time), `model` the one that was asked
        (as tasks name it)."""
        return self.price(
            response.usage,
            model=model,
            model_name=response.model_name,
            provider=response.provider_name,
            provider_url=response.provider_url,
            at=response.timestamp,
        )


@dataclass
class Spend:
    """A task's cost so far: what its priced requests cost, and how many were
    unpriced."""

    cost: Decimal
    unpriced: int

    @classmethod
    def of(cls, usage: Mapping[str, Any] | None) -> Spend:
        """The spend a task's `usage` shows. Usage written before costs were kept
        (no `currency`) had none of its requests priced."""
        usage = usage or {}
        if "currency" not in usage:
            return cls(Decimal(0), int(usage.get("requests", 0)))
        cost = usage.get("cost")
        return cls(Decimal(cost) if cost else Decimal(0), int(usage.get("unpriced_requests", 0)))

    def add(self, price: Decimal | None) -> None:
        if price is None:
            self.unpriced += 1
        else:
            self.cost += price

    def shown(self) -> dict[str, Any]:
        """`cost` (USD as a decimal string, exact; null when requests were unpriced
        and none priced added to it: never a claimed 0), `currency`,
        `unpriced_requests` (above 0: `cost` covers only the priced ones)."""
        known = self.cost != 0 or self.unpriced == 0
        return {
            "cost": decimal_text(self.cost) if known else None,
            "currency": CURRENCY,
            "unpriced_requests": self.unpriced,
        }


def decimal_text(value: Decimal) -> str:
    """A decimal as plain digits (no exponent, no trailing zeros): `0.0000525`."""
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text or "0"


class SpendLimit(BaseModel):
    """A spend budget's limits for each UTC `period` (`day` or `month`): USD
    (`max_cost`), tokens (`max_tokens`: input and output), or both."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    period: Literal["day", "month"]
    max_cost: Decimal | None = Field(default=None, gt=0, allow_inf_nan=False)
    max_tokens: int | None = Field(default=None, gt=0, le=2**62)

    @model_validator(mode="after")
    def _limits_something(self) -> SpendLimit:
        if self.max_cost is None and self.max_tokens is None:
            raise ValueError("a budget needs max_cost, max_tokens or both")
        return self


def parse_spend_limit(text: str) -> SpendLimit:
    """`{"period": "month", "max_cost": "100", "max_tokens": 5000000}`; ValueError
    saying what is wrong."""
    try:
        data = json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as exc:
        raise ValueError(f"a budget is not JSON: {exc}") from None
    try:
        return SpendLimit.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'value'}: {error['msg']}"
            for error in exc.errors()
        )
        raise ValueError(
            f"a budget: {problems} (expected period day or month, and max_cost in USD "
            "and/or max_tokens)"
        ) from None
