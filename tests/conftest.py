"""Shared fixtures: a real PostgreSQL for every test that needs one.

The server is `TASKSERVICE_TEST_DATABASE_URL` when set (CI: the local server), else
an embedded one in `.test-pg/`. Each test session gets a database of its own,
migrated with alembic; each test starts from empty tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import secrets
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pydantic_ai.models
import pytest
import uvicorn
from asgi_lifespan import LifespanManager
from pydantic_ai.models import Model
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.api.app import create_app
from taskservice.db import migrate
from taskservice.db.engine import asyncpg_dsn, create_engine
from taskservice.db.sql import Database
from taskservice.db.tables import metadata
from taskservice.db.tasks import TaskStore
from taskservice.domain.states import TRANSITIONS
from taskservice.settings import Settings
from tests.fakes.webhook_receiver import Receiver

ROOT = Path(__file__).resolve().parents[1]
DEBUG_SHUTDOWN = 8

# No test may reach a real model provider; the provider tests switch this back on
# around a scripted server on 127.0.0.1.
pydantic_ai.models.ALLOW_MODEL_REQUESTS = False


def _server_url() -> str:
    url = os.environ.get("TASKSERVICE_TEST_DATABASE_URL")
    if url:
        return url
    from taskservice.db.embedded import start_embedded

    return start_embedded(ROOT / ".test-pg")


def with_database(url: str, name: str) -> str:
    return make_url(url).set(database=name).render_as_string(hide_password=False)


async def admin_execute(server_url: str, sql: str) -> None:
    dsn, kwargs = asyncpg_dsn(with_database(server_url, "postgres"))
    conn = await asyncpg.connect(dsn, **kwargs)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def server_url() -> str:
    return _server_url()


# Every state change any test drives, through any statement of the code (the claim,
# the reaper's, cascading cancel, resuming parents, ...) or any process it starts, is
# checked at the database against `states.TRANSITIONS`: the SQL literals cannot drift
# from the table. Test setup that puts a task in a state directly says so
# (`allow_any_state`).
_ALLOWED = ",".join(f"{a.value}>{b.value}" for a, targets in TRANSITIONS.items() for b in targets)
TRANSITION_GUARD = f"""
CREATE FUNCTION taskservice_test_transition_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state <> OLD.state
       AND coalesce(current_setting('taskservice.test_setup', true), '') <> 'on'
       AND NOT (OLD.state || '>' || NEW.state = ANY(string_to_array('{_ALLOWED}', ','))) THEN
        RAISE EXCEPTION 'illegal transition % -> % (not in states.TRANSITIONS)',
            OLD.state, NEW.state;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER taskservice_test_transition_guard BEFORE UPDATE OF state ON tasks
    FOR EACH ROW EXECUTE FUNCTION taskservice_test_transition_guard();
"""


async def allow_any_state(conn: Any) -> None:
    """In a test's setup transaction (SQLAlchemy connection): skip the guard."""
    await conn.exec_driver_sql("SET LOCAL taskservice.test_setup = 'on'")


@asynccontextmanager
async def fresh_database(server_url: str, prefix: str) -> AsyncIterator[str]:
    """A database of its own on the server, migrated to head; dropped afterwards."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(3)}"
    await admin_execute(server_url, f'CREATE DATABASE "{name}"')
    try:
        url = with_database(server_url, name)
        await migrate.upgrade(url)
        yield url
    finally:
        await admin_execute(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
async def database_url(server_url: str) -> AsyncIterator[str]:
    async with fresh_database(server_url, "taskservice_test") as url:
        dsn, kwargs = asyncpg_dsn(url)
        conn = await asyncpg.connect(dsn, **kwargs)
        try:
            await conn.execute(TRANSITION_GUARD)
        finally:
            await conn.close()
        yield url


@pytest.fixture(scope="session")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, pool_size=20)
    yield engine
    await engine.dispose()


@pytest.fixture
async def db(engine: AsyncEngine) -> AsyncEngine:
    """The session's engine, on empty tables."""
    # service_secrets holds rows the migrations seed; everything else starts empty.
    names = ", ".join(t.name for t in metadata.sorted_tables if t.name != "service_secrets")
    async with engine.begin() as conn:
        await conn.exec_driver_sql(f"TRUNCATE {names} RESTART IDENTITY CASCADE")
    return engine


@pytest.fixture
async def store(db: AsyncEngine, database_url: str) -> AsyncIterator[TaskStore]:
    async with Database(database_url, pool_size=20) as database:
        yield TaskStore(database)


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        workers_enabled=False,
        auth_cache_seconds=0,
        poll_interval=0.2,
        lease_seconds=30,
    )


ClientFactory = Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]


@pytest.fixture
def make_client(db: AsyncEngine, settings: Settings) -> ClientFactory:
    """Start the real app (lifespan included) and talk to it over ASGI."""

    @asynccontextmanager
    async def factory(
        models: dict[str, Model] | None = None,
        tools: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> AsyncIterator[httpx.AsyncClient]:
        app_settings = settings.model_copy(update=overrides)
        if models:
            app_settings.allowed_models = [*app_settings.allowed_models, *models]
        app = create_app(app_settings, models=models, tools=tools)
        async with (
            LifespanManager(app, startup_timeout=30, shutdown_timeout=DEBUG_SHUTDOWN) as manager,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=manager.app), base_url="http://testserver"
            ) as client,
        ):
            client.app = app  # type: ignore[attr-defined]
            yield client

    return factory


@dataclass
class LiveServer:
    url: str
    app: Any


LiveFactory = Callable[..., AbstractAsyncContextManager[LiveServer]]


@pytest.fixture
def make_live(db: AsyncEngine, settings: Settings) -> LiveFactory:
    """The real app behind a real uvicorn server on 127.0.0.1, in this event loop."""

    @asynccontextmanager
    async def factory(
        models: dict[str, Model] | None = None,
        tools: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> AsyncIterator[LiveServer]:
        app_settings = settings.model_copy(update=overrides)
        if models:
            app_settings.allowed_models = [*app_settings.allowed_models, *models]
        app = create_app(app_settings, models=models, tools=tools)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        server = uvicorn.Server(config)
        server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
        serving = asyncio.create_task(server.serve())
        try:
            await wait_for(lambda: server.started or serving.done(), timeout=30)
            if serving.done():
                serving.result()  # start-up failed: raise why
            yield LiveServer(url=f"http://127.0.0.1:{port}", app=app)
        finally:
            server.should_exit = True
            await asyncio.wait_for(serving, timeout=30)

    return factory


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A real webhook receiver on 127.0.0.1 (`tests.fakes.webhook_receiver`)."""
    async with Receiver() as running:
        yield running


@pytest.fixture
async def client(make_client: ClientFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client() as client:
        yield client


async def wait_for(
    predicate: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.02
) -> Any:
    """Poll a predicate (plain or async) until it returns something truthy."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


def random_uuid() -> str:
    return str(uuid.uuid4())
