"""The calls delegation makes to a remote A2A agent (`delegation.py`), and when they
are tried again: the SDK's clients of an agent, made from its card (`open_link`), every
URL checked like a webhook target and connected to only at the addresses checked
(`webhooks.http.CheckedTransport`); a call the remote cannot take for now (no
answer, a 5xx, a 408 or 429, a JSON-RPC internal error) tried again with backoff,
honouring its `Retry-After`, until the attempt's timeout draws near (`retried`); a
refusal, or an agent that stayed unavailable, is a `RemoteError`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import partial
from typing import Any

import httpx
from a2a.client import Client, ClientConfig, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.types import SendMessageRequest
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import A2AError, InternalError

from taskservice.agents.remote import RemoteAgent
from taskservice.webhooks.http import CheckedTransport
from taskservice.webhooks.targets import AllowList

log = logging.getLogger(__name__)

# A call the remote could not take for now (no answer, a 5xx, a 408 or 429, a
# JSON-RPC internal error) is tried again with backoff, doubling from the first
# delay up to the last, or after the remote's `Retry-After` when it is longer, until
# the attempt's timeout is this close: then the task fails, `remote_unavailable`.
_FIRST_RETRY = 0.2  # seconds
_LAST_RETRY = 5.0
_RETRY_MARGIN = 1.0  # seconds before the attempt's timeout (at most a tenth of it)
_UNAVAILABLE_STATUS = frozenset({408, 429})  # and every 5xx
_deadline: ContextVar[float] = ContextVar("delegation_deadline")  # of the run, loop time
# The bindings spoken, in order of preference when a card offers several (the card's
# own order decides, as the SDK recommends; gRPC would need the SDK's grpc extra).
_BINDINGS = (TransportProtocol.JSONRPC.value, TransportProtocol.HTTP_JSON.value)


class RemoteError(Exception):
    """The remote agent refused the call, or stayed unavailable until the attempt's
    timeout drew near (`unavailable`): the task fails."""

    def __init__(self, message: str, *, unavailable: bool = False) -> None:
        super().__init__(message)
        self.unavailable = unavailable


def _unreachable(exc: Exception) -> bool:
    """The call got no answer (the SDK says so with the transport's error as the
    cause), as opposed to an answer refusing it."""
    return isinstance(exc, httpx.TransportError) or isinstance(exc.__cause__, httpx.TransportError)


def unavailable(exc: Exception) -> float | None:
    """How long the remote asks to be left alone (its `Retry-After`, 0 when it does
    not say) when `exc` says it cannot take the call for now: no answer, a 5xx, a
    408 or 429, a JSON-RPC internal error. None: it refused the call."""
    if _unreachable(exc) or isinstance(exc, InternalError):
        return 0.0
    answered = exc if isinstance(exc, httpx.HTTPStatusError) else exc.__cause__
    if not isinstance(answered, httpx.HTTPStatusError):
        return None
    response = answered.response
    if response.status_code < 500 and response.status_code not in _UNAVAILABLE_STATUS:
        return None
    return _retry_after(response.headers.get("Retry-After"))


def _retry_after(value: str | None) -> float:
    """`Retry-After` in seconds: delta-seconds, or an HTTP date (RFC 9110); 0 when
    absent or unreadable."""
    if not value:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def set_deadline(timeout: float) -> None:
    """The calls of the run in this context are tried again until `timeout` seconds
    from now, less a margin (`_RETRY_MARGIN`, at most a tenth of it)."""
    margin = min(_RETRY_MARGIN, timeout / 10)
    _deadline.set(asyncio.get_running_loop().time() + timeout - margin)


async def retried(call: Any) -> Any:
    """`call()`, tried again with backoff while the remote cannot take it for now
    (`unavailable`), honouring its `Retry-After`, until the attempt's timeout
    draws near; a refusal (a 4xx, an A2A error) is final at once."""
    loop = asyncio.get_running_loop()
    deadline = _deadline.get(loop.time())
    delay = _FIRST_RETRY
    tries = 0
    while True:
        tries += 1
        try:
            return await call()
        except (httpx.TransportError, httpx.HTTPStatusError, A2AError) as exc:
            asked = unavailable(exc)
            if asked is None:
                raise RemoteError(f"the remote agent refused the call: {exc}") from exc
            wait = max(delay, asked)
            if loop.time() + wait > deadline:
                raise RemoteError(
                    f"the remote agent stayed unavailable ({tries} tries): {exc}",
                    unavailable=True,
                ) from exc
            log.info("remote agent unavailable (%s); trying again in %.1f s", exc, wait)
            await asyncio.sleep(wait)
            delay = min(delay * 2, _LAST_RETRY)


@dataclass(slots=True)
class Link:
    """The SDK's clients of a remote agent: `client` for calls, `streams` for
    following a task by stream (None: the agent's card says it does not stream)."""

    client: Client
    streams: Client | None


@asynccontextmanager
async def open_link(
    agent: RemoteAgent, *, allow: AllowList, allow_http: bool, ssl_context: ssl.SSLContext
) -> AsyncIterator[Link]:
    """The SDK's clients for the agent, from its card (read for each delegation:
    a card that changed holds at once), every request's URL checked first and
    its connection pinned to the addresses checked (`CheckedTransport`)."""
    headers = {"Authorization": f"Bearer {token}"} if (token := agent.token()) else {}
    checked = CheckedTransport(allow=allow, allow_http=allow_http, ssl_context=ssl_context)
    async with httpx.AsyncClient(
        transport=checked, timeout=httpx.Timeout(30, connect=10), headers=headers
    ) as http:
        try:
            response = await retried(partial(_card, http, agent.card))
            card = parse_agent_card(response.json())
        except (RemoteError, ValueError) as exc:
            gone = isinstance(exc, RemoteError) and exc.unavailable
            raise RemoteError(
                f"cannot read the agent card at {agent.card}: {exc}", unavailable=gone
            ) from exc
        # Messages are sent without a stream (the send returns once the remote
        # task exists, whose id is then written); tasks are followed by one.
        try:
            client = await create_client(card, client_config=_config(http, streaming=False))
            streams = None
            if card.capabilities.streaming:
                config = _config(http, streaming=True)
                streams = await create_client(card, client_config=config)
        except ValueError as exc:  # the SDK: "no compatible transports found"
            offered = ", ".join(sorted({i.protocol_binding for i in card.supported_interfaces}))
            raise RemoteError(
                f"the agent card at {agent.card} offers no interface spoken here "
                f"({offered or 'none'}; spoken: {', '.join(_BINDINGS)}): {exc}"
            ) from exc
        try:
            yield Link(client, streams)
        finally:
            await client.close()
            if streams is not None:
                await streams.close()


def _config(http: httpx.AsyncClient, *, streaming: bool) -> ClientConfig:
    return ClientConfig(
        streaming=streaming, httpx_client=http, supported_protocol_bindings=list(_BINDINGS)
    )


async def _card(http: httpx.AsyncClient, url: str) -> httpx.Response:
    response = await http.get(url)
    response.raise_for_status()  # a 5xx is tried again (`retried`), a 4xx is final
    return response


async def collect(client: Client, request: SendMessageRequest) -> list[Any]:
    return [answer async for answer in client.send_message(request)]
