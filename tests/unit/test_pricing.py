"""Pricing (`common/pricing.py`): the operator's prices as settings read them, what a
response costs by whom, and a task's spend as its `usage` shows it."""

from __future__ import annotations

from decimal import Decimal

import pytest
from genai_prices import calc_price
from pydantic import ValidationError
from pydantic_ai.usage import RequestUsage

from taskservice.common.pricing import (
    Pricing,
    Spend,
    SpendLimit,
    decimal_text,
    parse_model_prices,
    parse_spend_limit,
)
from taskservice.settings import Settings

USAGE = RequestUsage(input_tokens=1_000, output_tokens=500, cache_read_tokens=200)


def test_genai_prices_figure_by_the_provider_and_model_the_response_names() -> None:
    expected = calc_price(USAGE, "gpt-4o", provider_id="openai").total_price
    pricing = Pricing()
    # An address genai-prices does not know (a local server) falls back to the name.
    found = pricing.price(
        USAGE,
        model="openai-chat:gpt-4o",
        model_name="gpt-4o-2024-08-06",
        provider="openai",
        provider_url="http://127.0.0.1:9/v1",
    )
    assert found == expected
    assert pricing.price(USAGE, model="demo", model_name="demo") is None
    assert pricing.price(USAGE, model="openai-chat:x", model_name=None, provider="openai") is None


def test_an_operators_price_comes_first_by_the_tasks_model_then_the_answered_name() -> None:
    pricing = Pricing(
        parse_model_prices(
            '{"openai-chat:gpt-4o": {"input": 1, "output": 2, "cached_input": 0.5},'
            ' "llama-70b": {"input": 0.1, "output": 0.1}}'
        )
    )
    by_task = pricing.price(USAGE, model="openai-chat:gpt-4o", model_name="gpt-4o")
    assert by_task == (800 * 1 + 200 * Decimal("0.5") + 500 * 2) / Decimal(1_000_000)
    by_name = pricing.price(USAGE, model="openai-chat:gateway", model_name="llama-70b")
    # cached_input unset: cached tokens cost what input does.
    assert by_name == Decimal("0.00015")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nope", "not JSON"),
        ("[1]", "expected a JSON object"),
        ('{"m": {"input": 1}}', "output: Field required"),
        ('{"m": {"input": -1, "output": 1}}', "greater than or equal to 0"),
        ('{"m": {"input": 1, "output": 1, "cache": 1}}', "cache: Extra inputs"),
        ('{" ": {"input": 1, "output": 1}}', "a model name is empty"),
    ],
)
def test_bad_prices_stop_the_start_saying_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_model_prices(text)
    with pytest.raises(ValidationError, match=says):
        Settings(model_prices=text)  # type: ignore[arg-type]


def test_prices_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKSERVICE_MODEL_PRICES", '{"mine": {"input": 0.2, "output": 0.6}}')
    prices = Settings().model_prices
    assert prices["mine"].input == Decimal("0.2")
    assert prices["mine"].cached_input is None
    monkeypatch.setenv("TASKSERVICE_MODEL_PRICES", "")
    assert Settings().model_prices == {}


def test_spend_is_exact_and_unpriced_is_never_free() -> None:
    spend = Spend.of({})
    assert spend.shown() == {"cost": "0", "currency": "USD", "unpriced_requests": 0}
    for _ in range(10):
        spend.add(Decimal("0.1"))
    assert spend.shown()["cost"] == "1"  # 10 x 0.1, no float drift
    spend.add(None)
    assert spend.shown() == {"cost": "1", "currency": "USD", "unpriced_requests": 1}
    nothing_priced = Spend.of({})
    nothing_priced.add(None)
    assert nothing_priced.shown()["cost"] is None
    # Read back from a task's usage, and from usage written before costs were kept.
    assert Spend.of(spend.shown() | {"requests": 11}) == spend
    assert Spend.of({"input_tokens": 5, "output_tokens": 3, "requests": 2}) == Spend(Decimal(0), 2)
    assert Spend.of({"cost": None, "currency": "USD", "unpriced_requests": 3}) == Spend(
        Decimal(0), 3
    )


def test_decimal_text_is_plain_digits() -> None:
    assert decimal_text(Decimal("0.00000525000")) == "0.00000525"
    assert decimal_text(Decimal("1E+1")) == "10"
    assert decimal_text(Decimal("0E-12")) == "0"


def test_a_spend_limit_is_read_exactly_and_refused_with_what_is_wrong() -> None:
    limit = parse_spend_limit('{"period": "month", "max_cost": 12.10, "max_tokens": 5000000}')
    assert limit == SpendLimit(period="month", max_cost=Decimal("12.10"), max_tokens=5_000_000)
    assert str(limit.max_cost) == "12.10"  # the JSON's digits, not a float's
    assert parse_spend_limit('{"period": "day", "max_tokens": 10}').max_cost is None
    for text, said in [
        ('{"period": "week", "max_cost": 1}', "period"),
        ('{"period": "day"}', "needs max_cost, max_tokens or both"),
        ('{"period": "day", "max_cost": -1}', "max_cost"),
        ('{"period": "day", "max_cost": 1, "colour": 2}', "colour"),
        ("month", "not JSON"),
    ]:
        with pytest.raises(ValueError, match=said):
            parse_spend_limit(text)
