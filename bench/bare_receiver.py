"""The cheapest webhook receiver: a bare ASGI app that answers 200 to everything
(run by `bench/webhooks.py` under uvicorn in its own process)."""

from __future__ import annotations

from typing import Any


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})
