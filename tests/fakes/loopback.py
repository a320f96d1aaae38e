"""An ASGI app served by uvicorn on a free port of 127.0.0.1, in this event loop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def served(app: Any, port: int) -> AsyncIterator[None]:
    """`app` on `port` until the block ends (its start-up failure raised)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                serving.result()
            await asyncio.sleep(0.02)
        yield
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, timeout=30)
