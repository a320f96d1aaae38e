"""API keys: stored as SHA-256 hashes, never as keys.

Keys are 32 random bytes, so a fast hash is enough (there is nothing to brute-force);
what matters is that a leaked table does not leak usable keys.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid

from sqlalchemy import exists, func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.notify import KEYS_CHANNEL
from taskservice.db.tables import api_keys, service_secrets
from taskservice.domain.ids import uuid7
from taskservice.domain.models import ApiKey

KEY_PREFIX = "tsk_"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _from_row(row: object) -> ApiKey:
    m = row._mapping  # type: ignore[attr-defined]  # noqa: SLF001
    return ApiKey(
        id=m["id"],
        tenant=m["tenant"],
        name=m["name"],
        prefix=m["prefix"],
        created_at=m["created_at"],
        revoked_at=m["revoked_at"],
        admin=m["admin"],
    )


# Every process drops its cached lookups when a key is created or revoked.
_CHANGED = select(func.pg_notify(KEYS_CHANNEL, ""))


class ApiKeyStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def create(
        self, *, tenant: str, name: str | None = None, admin: bool = False
    ) -> tuple[str, ApiKey]:
        """Create a key; the key itself is returned once and never stored. An `admin`
        key (only ever made here, by the operator's `keys create --admin`) may also
        call the admin routes."""
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        stmt = (
            api_keys.insert()
            .values(
                id=uuid7(),
                tenant=tenant,
                name=name,
                prefix=key[: len(KEY_PREFIX) + 6],
                key_hash=hash_key(key),
                admin=admin,
            )
            .returning(*api_keys.c)
        )
        async with self.engine.begin() as conn:
            row = (await conn.execute(stmt)).one()
            await conn.execute(_CHANGED)
        return key, _from_row(row)

    async def find(self, key: str) -> tuple[str, uuid.UUID, bool] | None:
        """The tenant, id and admin flag of an active key."""
        stmt = select(api_keys.c.tenant, api_keys.c.id, api_keys.c.admin).where(
            api_keys.c.key_hash == hash_key(key), api_keys.c.revoked_at.is_(None)
        )
        async with self.engine.connect() as conn:
            row = (await conn.execute(stmt)).first()
        return (row.tenant, row.id, row.admin) if row is not None else None

    async def is_active(self, key_id: uuid.UUID) -> bool:
        stmt = select(exists().where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None)))
        async with self.engine.connect() as conn:
            return bool((await conn.execute(stmt)).scalar_one())

    async def any_created(self) -> bool:
        """Whether any key was ever created (revoked ones count: see
        `usecases/auth.py`)."""
        async with self.engine.connect() as conn:
            return bool((await conn.execute(select(exists().select_from(api_keys)))).scalar_one())

    async def list_keys(self, *, tenant: str | None = None) -> list[ApiKey]:
        stmt = select(api_keys).order_by(api_keys.c.created_at)
        if tenant is not None:
            stmt = stmt.where(api_keys.c.tenant == tenant)
        async with self.engine.connect() as conn:
            return [_from_row(row) for row in (await conn.execute(stmt)).all()]

    async def revoke(self, key_id: uuid.UUID) -> ApiKey | None:
        stmt = (
            update(api_keys)
            .where(api_keys.c.id == key_id)
            .values(revoked_at=func.coalesce(api_keys.c.revoked_at, func.now()))
            .returning(*api_keys.c)
        )
        async with self.engine.begin() as conn:
            row = (await conn.execute(stmt)).first()
            await conn.execute(_CHANGED)
        return _from_row(row) if row is not None else None


async def service_secret(engine: AsyncEngine, name: str) -> str:
    """A secret every replica shares (created by a migration)."""
    stmt = select(service_secrets.c.value).where(service_secrets.c.name == name)
    async with engine.connect() as conn:
        value: str = (await conn.execute(stmt)).scalar_one()
    return value
