"""Rate limit settings: what `TASKSERVICE_RATE_LIMITS` accepts, what it refuses and
says, and which budgets a model's requests draw from."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from taskservice.common.rate_limits import (
    RateLimit,
    budget_keys,
    estimate_tokens,
    parse_rate_limits,
)
from taskservice.settings import Settings


def test_budgets_by_model_and_by_provider_in_each_unit() -> None:
    limits = parse_rate_limits("openai:gpt-4o=500rpm,30000tpm; anthropic = 5 RPS ;ollama=10tps")
    assert limits == {
        "openai:gpt-4o": RateLimit("openai:gpt-4o", 500, 60, 30000, 60),
        "anthropic": RateLimit("anthropic", requests=5, requests_period=1),
        "ollama": RateLimit("ollama", tokens=10, tokens_period=1),
    }
    assert limits["openai:gpt-4o"].describe() == (
        "openai:gpt-4o: 500 requests per 60 s, 30000 tokens per 60 s"
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("openai", "expected <model or provider>=<amount><unit>"),
        ("openai=500", "'500' is not <amount><unit>"),
        ("openai=500rph", "is not <amount><unit> (units: rpm, rps, tpm, tps)"),
        ("openai=0rpm", "must be above 0"),
        ("openai=5rpm,6rps", "limits requests twice"),
        ("openai=5rpm;openai=6rpm", "'openai' is given twice"),
        ("=5rpm", "expected <model or provider>"),
    ],
)
def test_a_bad_rate_limit_is_refused_saying_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match="rate limit") as caught:
        parse_rate_limits(text)
    assert says in str(caught.value)
    with pytest.raises(ValidationError) as refused:
        Settings(rate_limits=text)
    assert says in str(refused.value)


def test_the_setting_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKSERVICE_RATE_LIMITS", "offline=2rps")
    assert Settings().rate_limits == {"offline": RateLimit("offline", 2, 1)}
    monkeypatch.delenv("TASKSERVICE_RATE_LIMITS")
    assert Settings().rate_limits == {}


def test_a_request_draws_from_its_model_s_and_its_provider_s_budgets() -> None:
    limits = parse_rate_limits("openai=100rpm; openai:gpt-4o=10rpm; anthropic:claude=5rpm")
    assert budget_keys("openai:gpt-4o", limits) == ("openai", "openai:gpt-4o")
    assert budget_keys("openai:gpt-4o-mini", limits) == ("openai",)
    assert budget_keys("anthropic:other", limits) == ()
    assert budget_keys("offline", limits) == ()


def test_tokens_are_estimated_from_characters() -> None:
    assert estimate_tokens(0) == 1
    assert estimate_tokens(400) == 100
