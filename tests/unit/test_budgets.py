"""Budgets, unit by unit: what a request is estimated to cost before it is sent (its
input as the rate limits estimate it, its output bounded), the task's own budget,
the run's gate over its budgets, what `max_cost` and `max_tokens` accept, and the
profiles' defaults and fallback model as start-up checks them."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from taskservice.agents.budgeted import request_characters
from taskservice.agents.profiles import ProfileError, load_profiles
from taskservice.agents.spending import SpendCheckedModel
from taskservice.agents.tools import BUILTIN_TOOLS
from taskservice.common.pricing import Pricing, SpendLimit, parse_model_prices
from taskservice.common.rate_limits import estimate_tokens
from taskservice.common.spending import (
    BudgetExhausted,
    Charge,
    ModelCall,
    TaskBudget,
    spending,
)
from taskservice.domain.budgets import check_max_cost, check_max_tokens
from taskservice.domain.errors import InvalidRequest
from taskservice.settings import Settings
from taskservice.worker.spend import RunSpend

PRICES = Pricing(parse_model_prices('{"openai-chat:my-llama": {"input": 2, "output": 6}}'))
LLAMA = ModelCall(model="openai-chat:my-llama", model_name="my-llama", provider="openai")


class Recorder:
    """A spend gate that records what it is asked and lets everything through."""

    def __init__(self) -> None:
        self.reserved: list[tuple[ModelCall, int, int]] = []
        self.settled: list[Any] = []

    async def reserve(self, call: ModelCall, *, input_tokens: int, output_tokens: int) -> Charge:
        self.reserved.append((call, input_tokens, output_tokens))
        return Charge(Decimal(0), input_tokens + output_tokens)

    async def settle(self, call: ModelCall, reserved: Charge, response: Any) -> None:
        self.settled.append(response)


def _answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(
        parts=[TextPart("ok")], usage=RequestUsage(input_tokens=9, output_tokens=2)
    )


async def test_a_request_is_estimated_as_the_rate_limits_estimate_it_with_an_output_bound() -> None:
    model = SpendCheckedModel(FunctionModel(_answer), name="fn", output_tokens=1024)
    messages: list[ModelMessage] = [ModelRequest.user_text_prompt("x" * 400)]
    gate = Recorder()
    with spending(gate):
        await model.request(messages, None, ModelRequestParameters())
        await model.request(messages, {"max_tokens": 50}, ModelRequestParameters())
    expected = estimate_tokens(request_characters(messages))
    assert expected == 100  # a quarter of the characters
    assert [(tokens, bound) for _, tokens, bound in gate.reserved] == [
        (expected, 1024),  # no max_tokens setting: the operator's bound
        (expected, 50),  # the request's own max_tokens
    ]
    assert [r.usage.output_tokens for r in gate.settled] == [2, 2]  # settled with the answer


async def test_without_a_gate_a_request_is_not_checked() -> None:
    model = SpendCheckedModel(FunctionModel(_answer), name="fn", output_tokens=1024)
    response = await model.request(
        [ModelRequest.user_text_prompt("hi")], None, ModelRequestParameters()
    )
    assert response.parts == [TextPart("ok")]


async def test_the_estimate_is_priced_at_the_models_price_and_an_unpriced_one_costs_nothing() -> (
    None
):
    lines: list[tuple[str, str]] = []

    async def log(level: str, message: str) -> None:
        lines.append((level, message))

    budget = TaskBudget(max_cost=Decimal(1), max_tokens=None, spent_cost=Decimal(0), spent_tokens=0)
    gate = RunSpend([budget], pricing=PRICES, log=log)
    charge = await gate.reserve(LLAMA, input_tokens=1_000, output_tokens=500)
    # $2 per million input tokens, $6 per million output.
    assert charge == Charge(Decimal("0.005"), 1_500, priced=True)
    unknown = ModelCall(model="openai-chat:nobody", model_name="nobody-knows", provider="x")
    free = await gate.reserve(unknown, input_tokens=1_000, output_tokens=500)
    assert free == Charge(Decimal(0), 1_500, priced=False)
    assert budget.cost == Decimal("0.005")
    assert lines == []


async def test_a_task_budget_refuses_what_would_pass_it_and_settles_the_real_usage() -> None:
    budget = TaskBudget(
        max_cost=Decimal("0.01"), max_tokens=3_000, spent_cost=Decimal("0.004"), spent_tokens=0
    )
    first = Charge(Decimal("0.005"), 1_500)
    assert await budget.reserve(first) is None
    await budget.settle(first, Charge(Decimal("0.003"), 1_000))  # cost less than feared
    assert (budget.cost, budget.tokens) == (Decimal("0.007"), 1_000)
    refused = await budget.reserve(Charge(Decimal("0.0031"), 10))
    assert refused is not None
    assert refused.name == "max_cost"
    assert refused.shown() == {
        "scope": "task",
        "name": "max_cost",
        "limit": "0.01",
        "spent": "0.007",
        "next_request": "0.0031",
    }
    tokens = await budget.reserve(Charge(Decimal(0), 2_001))
    assert tokens is not None
    assert tokens.name == "max_tokens"
    assert "max_tokens of 3000: 1000 tokens used" in tokens.describe()
    assert (budget.cost, budget.tokens) == (Decimal("0.007"), 1_000)  # refused: nothing taken


async def test_the_gate_raises_budget_exhausted_and_gives_back_what_earlier_budgets_took() -> None:
    async def log(level: str, message: str) -> None:
        raise AssertionError("no switch to log")

    roomy = TaskBudget(max_cost=None, max_tokens=10_000, spent_cost=Decimal(0), spent_tokens=0)
    tight = TaskBudget(
        max_cost=Decimal("0.001"), max_tokens=None, spent_cost=Decimal(0), spent_tokens=0
    )
    gate = RunSpend([roomy, tight], pricing=PRICES, log=log)
    with pytest.raises(BudgetExhausted) as refused:
        await gate.reserve(LLAMA, input_tokens=1_000, output_tokens=500)
    assert refused.value.exhausted.name == "max_cost"
    assert refused.value.model == LLAMA.model
    assert roomy.tokens == 0  # given back


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0.50", Decimal("0.50")), (2, Decimal(2)), (0.1, Decimal("0.1")), (None, None)],
)
def test_max_cost_takes_decimal_text_and_numbers_exactly(value: Any, expected: Any) -> None:
    assert check_max_cost(value) == expected


@pytest.mark.parametrize("value", [0, -1, "0", "abc", "NaN", "Infinity", True, [], "1e9"])
def test_max_cost_refuses_what_is_no_positive_amount(value: Any) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_max_cost(value)
    assert refused.value.extensions["field"] == "max_cost"


@pytest.mark.parametrize("value", [0, -3, "10", 1.5, True])
def test_max_tokens_is_a_positive_integer(value: Any) -> None:
    with pytest.raises(InvalidRequest):
        check_max_tokens(value)
    assert check_max_tokens(7) == 7


def _profiles(tmp_path: Path, body: str, **settings: Any) -> dict[str, Any]:
    path = tmp_path / "agents.toml"
    path.write_text(body)
    loaded = Settings(database_url=None, agents_file=str(path), **settings)
    return dict(load_profiles(loaded, known_tools=set(BUILTIN_TOOLS)))


def test_a_profile_gives_a_default_budget_and_an_allowed_fallback_model(tmp_path: Path) -> None:
    loaded = _profiles(
        tmp_path,
        '[agents.thrifty]\nmodel = "offline"\nmax_cost = "0.25"\nmax_tokens = 900\n'
        'fallback_model = "offline:0.1"\n',
    )
    thrifty = loaded["thrifty"]
    assert (thrifty.max_cost, thrifty.max_tokens) == (Decimal("0.25"), 900)
    assert thrifty.fallback_model == "offline:0.1"
    assert thrifty.budget is None


def test_a_profile_may_cap_what_all_its_tasks_spend_per_period(tmp_path: Path) -> None:
    loaded = _profiles(
        tmp_path,
        '[agents.busy]\nmodel = "offline"\nbudget = {period = "day", max_cost = "25.50"}\n'
        '[agents.other]\nmodel = "offline"\n',
    )
    assert loaded["busy"].budget == SpendLimit(period="day", max_cost=Decimal("25.50"))
    assert loaded["other"].budget is None  # a total is no profile's but its own


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ('fallback_model = "openai:gpt-4o"', "fallback_model 'openai:gpt-4o' is not an allowed"),
        ('fallback_model = "offline"', "fallback_model is its model itself"),
        ("max_cost = -1", "max_cost must be above 0"),
        ('max_tokens = "many"', "max_tokens must be an integer"),
        ('budget = {period = "week", max_cost = 1}', "budget: period"),
        ('budget = {period = "day"}', "needs max_cost, max_tokens or both"),
    ],
)
def test_start_up_refuses_a_bad_budget_or_fallback(tmp_path: Path, body: str, says: str) -> None:
    with pytest.raises(ProfileError) as refused:
        _profiles(tmp_path, f'[agents.thrifty]\nmodel = "offline"\n{body}\n')
    assert says in str(refused.value)
    assert "thrifty" in str(refused.value)
