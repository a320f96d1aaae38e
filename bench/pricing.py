"""What pricing a model response costs (`common/pricing.Pricing.price`, called once per
response by `worker/ledger.RunLedger`), beside the CPU the ledger spends on the same
response's write without it (its rows encoded as `RunLedger._rows` encodes them: the
turn's messages as JSON, their summaries for the `message` events). The statement's
round trip to PostgreSQL comes on top of the latter and is not measured here.

    .venv/bin/python bench/pricing.py            # --n 20000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.usage import RequestUsage

from taskservice.common.pricing import Pricing, parse_model_prices
from taskservice.worker.turns import summary


def per_call_us(call: Callable[[], Any], n: int) -> float:
    call()  # warm
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(n):
            call()
        best = min(best, time.perf_counter() - started)
    return best / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20_000)
    n = parser.parse_args().n

    usage = RequestUsage(input_tokens=1_400, output_tokens=300, cache_read_tokens=1_024)
    response = ModelResponse(
        parts=[
            TextPart("Reading the file first."),
            ToolCallPart("read_file", {"path": "src/app.py", "lines": [1, 200]}, "call_1"),
        ],
        usage=usage,
        model_name="gpt-4o-mini-2024-07-18",
        provider_name="openai",
        provider_url="http://127.0.0.1:11434/v1",
    )
    request = ModelRequest(parts=[ToolReturnPart("read_file", "x = 1\n" * 200, "call_0")])
    turn = [request, response]

    pricing = Pricing(parse_model_prices('{"openai-chat:llama3.2": {"input": 0.2, "output": 0.6}}'))
    Pricing.preload()

    def priced(model: str, name: str) -> Callable[[], Any]:
        return lambda: pricing.price(
            usage,
            model=model,
            model_name=name,
            provider=response.provider_name,
            provider_url=response.provider_url,
            at=response.timestamp,
        )

    def rows() -> Any:
        encoded = ModelMessagesTypeAdapter.dump_python(turn, mode="json")
        return encoded, [summary(message) for message in turn]

    figures = {
        "genai-prices (gpt-4o-mini, by a local URL, then the name)": per_call_us(
            priced("openai-chat:gpt-4o-mini", "gpt-4o-mini-2024-07-18"), n
        ),
        "operator's price (TASKSERVICE_MODEL_PRICES)": per_call_us(
            priced("openai-chat:llama3.2", "llama3.2"), n
        ),
        "unpriced (a name nobody knows)": per_call_us(
            priced("openai-chat:fake-gpt", "fake-gpt"), max(n // 10, 100)
        ),
        "the ledger's rows of the turn, without pricing": per_call_us(rows, n),
    }
    width = max(map(len, figures))
    for name, us in figures.items():
        print(f"{name:<{width}}  {us:8.1f} µs")
    base = figures["the ledger's rows of the turn, without pricing"]
    worst = max(us for name, us in figures.items() if not name.startswith("the ledger"))
    print(f"pricing at worst: {worst / base:.0%} of the rows' encoding (before the statement)")


if __name__ == "__main__":
    main()
