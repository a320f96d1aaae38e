"""Who is calling: API keys → tenant, and the open development mode.

Key lookups are cached for `auth_cache_seconds` (so a revoked key stops working
within that time) to keep a database round trip off every request.
"""

from __future__ import annotations

import re
import time

from taskservice.db.keys import ApiKeyStore, hash_key
from taskservice.errors import Unauthorized
from taskservice.settings import Settings

OPEN_TENANT = "default"
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_CACHE_LIMIT = 10_000


def valid_tenant(name: str) -> bool:
    return bool(TENANT_PATTERN.match(name))


class StartupRefused(RuntimeError):
    pass


class Authenticator:
    def __init__(self, keys: ApiKeyStore, settings: Settings) -> None:
        self.keys = keys
        self.settings = settings
        self._cache: dict[str, tuple[str | None, float]] = {}
        self._open_until = 0.0  # open mode confirmed (no active key) until this time
        # Settings do not change while serving: decided once, not per request.
        self.open_mode_allowed = settings.auth_mode == "auto" and settings.binds_loopback

    async def check_startup(self) -> bool:
        """Refuse to serve unauthenticated beyond loopback. Returns True in open mode."""
        if await self.keys.any_active():
            return False
        if self.settings.auth_mode == "required":
            return False
        if not self.settings.binds_loopback:
            raise StartupRefused(
                f"no API key exists and the service would listen on {self.settings.host}: "
                "create one with `taskservice keys create --tenant NAME`, or bind to "
                "127.0.0.1 for open development mode"
            )
        return True

    async def tenant_for(self, authorization: str | None) -> str:
        if authorization:
            scheme, _, key = authorization.partition(" ")
            if scheme.lower() != "bearer" or not key.strip():
                raise Unauthorized("use `Authorization: Bearer <API key>`")
            tenant = await self._lookup(key.strip())
            if tenant is None:
                raise Unauthorized("the API key is unknown or revoked")
            return tenant
        if self.open_mode_allowed and await self._still_open():
            return OPEN_TENANT
        raise Unauthorized("an API key is required: send `Authorization: Bearer <API key>`")

    async def _lookup(self, key: str) -> str | None:
        digest = hash_key(key)
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and cached[1] > now:
            return cached[0]
        tenant = await self.keys.tenant_for(key)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[digest] = (tenant, now + self.settings.auth_cache_seconds)
        return tenant

    async def _still_open(self) -> bool:
        now = time.monotonic()
        if self._open_until > now:
            return True
        if await self.keys.any_active():
            return False
        self._open_until = now + self.settings.auth_cache_seconds
        return True
