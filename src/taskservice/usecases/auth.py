"""Who is calling: API keys → tenant, and the open development mode.

Key lookups are cached for `auth_cache_seconds`, to keep a database round trip off
every request, and dropped when a key is created or revoked anywhere (`forget`, on
the `taskservice_keys` notice): a revoked key stops working at once, within the
cache's time should a notice be lost. The same holds for what a key handed out:
stream tokens name the key that minted them, and open streams re-check their key
(`still_valid`) as they poll.

Open mode (requests without a key act as tenant `default`) is for a developer's
loopback server before the first key: in `auto` mode it ends for good once any key
has been created, even if every key is later revoked (revoking all keys must not
re-open a server). `TASKSERVICE_AUTH_MODE=open` turns it on explicitly, still on
loopback only.
"""

from __future__ import annotations

import math
import re
import time
import uuid
from dataclasses import dataclass

from taskservice.db.keys import ApiKeyStore, hash_key
from taskservice.domain.errors import NotFound, Unauthorized
from taskservice.domain.ids import parse_uuid
from taskservice.domain.models import ApiKey
from taskservice.settings import Settings

OPEN_TENANT = "default"
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_CACHE_LIMIT = 10_000


def valid_tenant(name: str) -> bool:
    return bool(TENANT_PATTERN.match(name))


class StartupRefused(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: str
    key_id: uuid.UUID | None  # None: open mode, no key
    admin: bool = False  # an operator's key (`taskservice keys create --admin`)


class Authenticator:
    def __init__(self, keys: ApiKeyStore, settings: Settings) -> None:
        self.keys = keys
        self.settings = settings
        self._principals: dict[str, tuple[Principal | None, float]] = {}
        self._active: dict[uuid.UUID, tuple[bool, float]] = {}
        # Settings do not change while serving: decided once, not per request.
        self.open_mode_allowed = settings.auth_mode != "required" and settings.binds_loopback
        # Until this time open mode holds; in `auto` mode it ends for good (-inf) once
        # a key has been seen, in `open` mode it never ends.
        self._open_until = math.inf if settings.auth_mode == "open" else 0.0

    async def check_startup(self) -> bool:
        """Refuse to serve unauthenticated beyond loopback. Returns True in open mode."""
        mode = self.settings.auth_mode
        if mode == "required":
            return False
        if mode == "auto" and await self.keys.any_created():
            self._open_until = -math.inf
            return False
        if not self.settings.binds_loopback:
            if mode == "open":
                raise StartupRefused(
                    f"TASKSERVICE_AUTH_MODE=open serves loopback only, not {self.settings.host}"
                )
            raise StartupRefused(
                f"no API key exists and the service would listen on {self.settings.host}: "
                "create one with `taskservice keys create --tenant NAME`, or bind to "
                "127.0.0.1 for open development mode"
            )
        return True

    async def authenticate(self, authorization: str | None) -> Principal:
        if authorization:
            scheme, _, key = authorization.partition(" ")
            if scheme.lower() != "bearer" or not key.strip():
                raise Unauthorized("use `Authorization: Bearer <API key>`")
            principal = await self._lookup(key.strip())
            if principal is None:
                raise Unauthorized("the API key is unknown or revoked")
            return principal
        if await self.is_open():
            return Principal(tenant=OPEN_TENANT, key_id=None)
        raise Unauthorized("an API key is required: send `Authorization: Bearer <API key>`")

    async def is_open(self) -> bool:
        """Whether open mode holds: a request without a key is served (as tenant
        `default`), so a key is not required of anyone (the agent card says so)."""
        return self.open_mode_allowed and await self._still_open()

    async def still_valid(self, key_id: uuid.UUID | None) -> bool:
        """Whether what `key_id` authorized (a stream token, an open stream) still
        holds: the key is not revoked, or for open mode (None), open mode still is."""
        if key_id is None:
            return await self.is_open()
        now = time.monotonic()
        cached = self._active.get(key_id)
        if cached is not None and cached[1] > now:
            return cached[0]
        active = await self.keys.is_active(key_id)
        if len(self._active) >= _CACHE_LIMIT:
            self._active.clear()
        self._active[key_id] = (active, now + self.settings.auth_cache_seconds)
        return active

    async def _lookup(self, key: str) -> Principal | None:
        digest = hash_key(key)
        now = time.monotonic()
        cached = self._principals.get(digest)
        if cached is not None and cached[1] > now:
            return cached[0]
        found = await self.keys.find(key)
        principal = Principal(tenant=found[0], key_id=found[1], admin=found[2]) if found else None
        if len(self._principals) >= _CACHE_LIMIT:
            self._principals.clear()
        self._principals[digest] = (principal, now + self.settings.auth_cache_seconds)
        return principal

    def forget(self) -> None:
        """A key was created or revoked (somewhere): look every key, and whether open
        mode still holds, up again."""
        self._principals.clear()
        self._active.clear()
        if math.isfinite(self._open_until):
            self._open_until = 0.0

    async def _still_open(self) -> bool:
        now = time.monotonic()
        if self._open_until > now:
            return True
        if self._open_until == -math.inf:
            return False
        if await self.keys.any_created():
            self._open_until = -math.inf  # a key has existed: never open again (auto)
            return False
        self._open_until = now + self.settings.auth_cache_seconds
        return True


@dataclass(frozen=True, slots=True)
class KeyCreated:
    key: str  # the key itself: shown this once, never stored
    record: ApiKey
    ended_open_mode: bool  # it was the first key: requests without one are refused now


class TenantKeys:
    """A tenant's own API keys, as the tenant manages them over HTTP (the CLI's
    `taskservice keys` manages every tenant's, from the database). Creating the first
    key ends open mode here at once, and in every other process on the notice the
    store sends (`Authenticator.forget`), exactly as `keys create` does."""

    def __init__(self, auth: Authenticator) -> None:
        self._auth = auth

    async def of_tenant(self, tenant: str) -> list[ApiKey]:
        return await self._auth.keys.list_keys(tenant=tenant)

    def first_key_ends_open_mode(self) -> bool:
        """Whether creating a key ends open mode (`auto`; `open` never ends)."""
        return self._auth.settings.auth_mode == "auto"

    async def create(self, tenant: str, name: str | None) -> KeyCreated:
        was_open = await self._auth.is_open()
        key, record = await self._auth.keys.create(tenant=tenant, name=name)
        self._auth.forget()  # this process at once; the others on the notice
        ended = was_open and not await self._auth.is_open()
        return KeyCreated(key=key, record=record, ended_open_mode=ended)

    async def get(self, tenant: str, key_id: str) -> ApiKey:
        """One of the tenant's keys (another tenant's, or none: not found)."""
        wanted = parse_uuid(key_id)
        found = [k for k in await self.of_tenant(tenant) if k.id == wanted]
        if wanted is None or not found:
            raise NotFound(f"API key {key_id} not found")
        return found[0]

    async def revoke(self, tenant: str, key_id: str) -> ApiKey:
        """Revoke one of the tenant's keys (again: its first revocation stands)."""
        # A key's tenant never changes: whether it is the tenant's is read once.
        wanted = (await self.get(tenant, key_id)).id
        revoked = await self._auth.keys.revoke(wanted)
        if revoked is None:  # pragma: no cover - keys are never deleted
            raise NotFound(f"API key {key_id} not found")
        self._auth.forget()
        return revoked
