"""Task budgets (issue 41 §2, its first part): `max_cost` and `max_tokens` on a task,
or its profile's default, checked before each model request against what the
request may cost at most; a run that would pass one stops before sending it, failed
`budget_exhausted` with its partial result, and goes on as a fork with a larger
budget; a profile's fallback model takes over when the request fits there. Against
the fake OpenAI server, priced by the operator's prices (USD per million tokens)."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic_ai.models import override_allow_model_requests

from taskservice.common.pricing import parse_model_prices
from tests.conftest import ClientFactory
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.integration.helpers import until_state
from tests.integration.test_a2a_v10 import message, rpc

DEAR = "openai-chat:fake-dear"  # $1000 per million tokens: $0.001 a token
CHEAP = "openai-chat:fake-cheap"  # $1 per million: $0.000001 a token
UNPRICED = "openai-chat:fake-unpriced"  # priced by nobody
PRICES = parse_model_prices(
    f'{{"{DEAR}": {{"input": 1000, "output": 1000}}, "{CHEAP}": {{"input": 1, "output": 1}}}}'
)
OUTPUT_BOUND = 100  # TASKSERVICE_BUDGET_OUTPUT_TOKENS in these tests


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server, override_allow_model_requests(True):
        yield server


def _settings(fake: FakeOpenAI, **overrides: Any) -> dict[str, Any]:
    return {
        "workers_enabled": True,
        "openai_base_url": fake.base_url,
        "openai_api_key": "sk-test",
        "allowed_models": ["offline", DEAR, CHEAP, UNPRICED],
        "model_prices": PRICES,
        "budget_output_tokens": OUTPUT_BOUND,
        **overrides,
    }


def _first_step(text: str = "Halfway there.") -> Reply:
    """A response with text and a tool call: 1000 + 100 tokens ($1.10 at DEAR's price)."""
    return Reply(
        text=text,
        tool_calls=[("call_1", "report_progress", {"percent": 50, "note": "half"})],
        prompt_tokens=1_000,
        completion_tokens=100,
    )


async def _submit(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    created = await client.post("/v1/tasks", json={"input": "Do the thing.", **body})
    assert created.status_code == 201, created.text
    return created.json()  # type: ignore[no-any-return]


async def _log_lines(client: httpx.AsyncClient, task_id: str) -> list[dict[str, Any]]:
    events = (await client.get(f"/v1/tasks/{task_id}/events")).json()["events"]
    return [event["data"] for event in events if event["type"] == "log"]


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "not_streamed"])
async def test_a_max_cost_stops_the_run_before_the_request_that_would_pass_it(
    make_client: ClientFactory, fake: FakeOpenAI, streamed: bool
) -> None:
    # $1.10 spent after the first response; the next request may cost its estimated
    # input (a few dozen tokens) plus 100 output tokens, over $0.10: past $1.15.
    fake.queue(_first_step(), Reply(text="never asked"))
    settings = _settings(fake, delta_interval_ms=50 if streamed else 0)
    async with make_client(**settings) as client:
        task = await _submit(client, model=DEAR, max_cost="1.15")
        assert task["max_cost"] == "1.15"
        done = await until_state(client, task["id"], "completed", "failed")
        messages = (await client.get(f"/v1/tasks/{task['id']}/messages")).json()["messages"]
        lines = await _log_lines(client, task["id"])

    assert [bool(r.get("stream")) for r in fake.requests] == [streamed]  # one request only
    assert done["state"] == "failed", done
    error = done["error"]
    assert error["code"] == "budget_exhausted"
    assert error["budget"]["scope"] == "task"
    assert error["budget"]["name"] == "max_cost"
    assert error["budget"]["limit"] == "1.15"
    assert error["budget"]["spent"] == "1.1"
    assert Decimal(error["budget"]["next_request"]) > Decimal("0.05")
    assert "max_cost of 1.15 USD" in error["message"]
    assert "1.1 spent" in error["message"]
    assert done["result"] == "Halfway there."  # the partial result
    assert done["usage"]["cost"] == "1.1"
    assert done["attempt"] == 1  # not retried
    # Its whole ledger: the prompt, the response, the tool's result (the request
    # that was not sent).
    assert [m["kind"] for m in messages] == ["request", "response", "request"], messages
    assert any(line["level"] == "error" and "budget exhausted" in line["message"] for line in lines)


async def test_a_max_tokens_budget_stops_the_run_and_bounds_an_unpriced_model(
    make_client: ClientFactory, fake: FakeOpenAI
) -> None:
    fake.queue(_first_step(), Reply(text="never asked"))
    async with make_client(**_settings(fake)) as client:
        # Nobody prices the model: its cost counts 0 against max_cost, so only the
        # token budget stops it (1100 used, the next may take over 100 more).
        task = await _submit(client, model=UNPRICED, max_cost="0.0001", max_tokens=1_150)
        done = await until_state(client, task["id"], "completed", "failed")

    assert len(fake.requests) == 1
    assert done["state"] == "failed", done
    assert done["error"]["code"] == "budget_exhausted"
    budget = done["error"]["budget"]
    assert (budget["name"], budget["limit"], budget["spent"]) == ("max_tokens", 1_150, 1_100)
    assert budget["next_request"] > OUTPUT_BOUND
    assert "max_tokens of 1150" in done["error"]["message"]
    assert done["result"] == "Halfway there."
    assert done["usage"]["unpriced_requests"] == 1
    assert done["max_tokens"] == 1_150


async def test_a_fork_with_a_larger_budget_goes_on_and_completes(
    make_client: ClientFactory, fake: FakeOpenAI
) -> None:
    fake.queue(_first_step(), Reply(text="All done.", prompt_tokens=1_200, completion_tokens=20))
    async with make_client(**_settings(fake)) as client:
        task = await _submit(client, model=DEAR, max_cost="1.15")
        failed = await until_state(client, task["id"], "completed", "failed")
        assert failed["error"]["code"] == "budget_exhausted", failed
        forked = await client.post(f"/v1/tasks/{task['id']}/fork", json={"max_cost": 5})
        assert forked.status_code == 201, forked.text
        fork = forked.json()
        done = await until_state(client, fork["id"], "completed", "failed")
        source = (await client.get(f"/v1/tasks/{task['id']}")).json()

    assert done["state"] == "completed", done
    assert done["result"] == "All done."
    assert done["max_cost"] == "5"
    assert done["usage"]["cost"] == "1.22"  # its own request only: a fork starts at zero
    assert len(fake.requests) == 2  # the fork asked again where the source stopped
    assert fake.requests[1]["messages"][-1]["role"] == "tool"
    assert source["state"] == "failed"  # the source is not changed
    assert source["max_cost"] == "1.15"


async def test_a_profiles_default_budget_applies_and_a_tasks_own_wins(
    make_client: ClientFactory, fake: FakeOpenAI, tmp_path: Path
) -> None:
    profiles = tmp_path / "agents.toml"
    profiles.write_text(f'[agents.thrifty]\nmodel = "{DEAR}"\nmax_cost = "0.5"\nmax_tokens = 50\n')
    fake.queue(Reply(text="Answered.", prompt_tokens=30, completion_tokens=5))
    async with make_client(**_settings(fake, agents_file=profiles)) as client:
        by_default = await _submit(client, agent="thrifty")
        stopped = await until_state(client, by_default["id"], "completed", "failed")
        own = await _submit(client, agent="thrifty", max_tokens=10_000)
        done = await until_state(client, own["id"], "completed", "failed")

    assert (by_default["max_cost"], by_default["max_tokens"]) == ("0.5", 50)
    # 50 tokens cannot hold a request of 100 output tokens: stopped before any.
    assert stopped["state"] == "failed"
    assert stopped["error"]["budget"]["name"] == "max_tokens"
    assert stopped["result"] is None  # it wrote nothing
    assert (own["max_cost"], own["max_tokens"]) == ("0.5", 10_000)
    assert done["state"] == "completed", done
    assert len(fake.requests) == 1  # the task with its own budget's


async def test_a_fallback_model_takes_over_when_the_request_fits_there(
    make_client: ClientFactory, fake: FakeOpenAI, tmp_path: Path
) -> None:
    profiles = tmp_path / "agents.toml"
    profiles.write_text(f'[agents.frugal]\nmodel = "{DEAR}"\nfallback_model = "{CHEAP}"\n')
    fake.queue(
        _first_step(),
        Reply(text="Done cheaply.", prompt_tokens=1_000, completion_tokens=100),
    )
    async with make_client(**_settings(fake, agents_file=profiles)) as client:
        task = await _submit(client, agent="frugal", max_cost="1.15")
        done = await until_state(client, task["id"], "completed", "failed")
        lines = await _log_lines(client, task["id"])
        spent = (await client.get("/v1/usage", params={"group_by": "model"})).json()

    assert done["state"] == "completed", done
    assert done["result"] == "Done cheaply."
    assert [r["model"] for r in fake.requests[:2]] == ["fake-dear", "fake-cheap"]
    # The fallback's response is priced at the fallback's price.
    assert done["usage"]["cost"] == str(Decimal("1.1") + Decimal("0.0011"))
    switches = [line for line in lines if "fallback model" in line["message"]]
    assert len(switches) == 1, lines
    assert switches[0]["level"] == "warning"
    assert CHEAP in switches[0]["message"]
    assert "max_cost of 1.15 USD" in switches[0]["message"]
    # Each model's part, and the tenant's spend by model, split the same way.
    models = done["usage"]["models"]
    assert {m: (p["requests"], p["cost"]) for m, p in models.items()} == {
        DEAR: (1, "1.1"),
        CHEAP: (1, "0.0011"),
    }
    assert {g["model"]: g["cost"] for g in spent["groups"]} == {DEAR: "1.1", CHEAP: "0.0011"}


async def test_bad_budgets_are_a_422_problem_and_change_nothing(
    make_client: ClientFactory,
) -> None:
    bad = [
        {"max_cost": -1},
        {"max_cost": 0},
        {"max_cost": "0"},
        {"max_cost": "abc"},
        {"max_cost": "NaN"},
        {"max_cost": True},
        {"max_tokens": 0},
        {"max_tokens": -5},
        {"max_tokens": "many"},
    ]
    async with make_client() as client:
        before = (await client.get("/v1/tasks", params={"count": "exact"})).json()["total"]
        answers = [await client.post("/v1/tasks", json={"input": "x", **body}) for body in bad]
        source = await _submit(client)
        fork = await client.post(f"/v1/tasks/{source['id']}/fork", json={"max_cost": "-0.5"})
        after = (await client.get("/v1/tasks", params={"count": "exact"})).json()["total"]

    for body, answer in [*zip(bad, answers, strict=True), ({"fork": -0.5}, fork)]:
        assert answer.status_code == 422, (body, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
        field = next(iter(body))
        if field != "fork":
            assert field in answer.text, answer.text
    assert after == before + 1  # only the fork's source


async def test_a2a_metadata_and_a_schedules_template_carry_a_budget(
    make_client: ClientFactory,
) -> None:
    async with make_client() as client:
        sent = await rpc(
            client,
            "SendMessage",
            {
                "message": message("x"),
                "metadata": {"max_cost": "0.75", "max_tokens": 4_000},
                "configuration": {"returnImmediately": True},
            },
        )
        refused = await rpc(
            client, "SendMessage", {"message": message("y"), "metadata": {"max_cost": "-1"}}
        )
        schedule = await client.post(
            "/v1/schedules",
            json={"cron": "0 9 * * *", "task": {"input": "digest", "max_cost": 0.2}},
        )
        task = (await client.get(f"/v1/tasks/{sent['result']['task']['id']}")).json()

    assert (task["max_cost"], task["max_tokens"]) == ("0.75", 4_000)
    assert refused["error"]["code"] == -32602, refused
    assert "metadata.max_cost" in str(refused["error"])
    assert schedule.status_code == 201, schedule.text
    assert schedule.json()["task"]["max_cost"] == "0.2"
