"""Generated requests (schemathesis) against a real `taskservice serve` on loopback and
the committed OpenAPI document: no answer is a 5xx, and every answer is one the
document describes (status, content type, headers, body schema)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import hypothesis
import pytest
import schemathesis
from schemathesis import checks

from tests.acceptance.conftest import Server, cli_env, run_cli, serve
from tests.conftest import admin_execute, with_database

ROOT = Path(__file__).resolve().parents[2]
schema = schemathesis.openapi.from_path(ROOT / "openapi" / "openapi.json")


@pytest.fixture(scope="module")
async def server(
    server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Server, str]]:
    """A server on a database of its own (the keys it needs would close the open mode
    other tests rely on), with an API key, as deployed."""
    name = f"taskservice_generated_{secrets.token_hex(3)}"
    await admin_execute(server_url, f'CREATE DATABASE "{name}"')
    try:
        env = cli_env(
            TASKSERVICE_DATABASE_URL=with_database(server_url, name),
            TASKSERVICE_MAX_WAIT_SECONDS="1",  # long polls on generated ids end soon
        )
        assert run_cli("migrate", env=env).returncode == 0
        created = run_cli("keys", "create", "--tenant", "generated", env=env)
        assert created.returncode == 0, created.stderr
        with serve(env, tmp_path_factory.mktemp("generated") / "serve.log") as running:
            yield running, created.stdout.strip()
    finally:
        await admin_execute(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# No 5xx, and nothing the document does not say. (Not the checks that a schema-valid
# request is accepted: the document cannot say which models or profiles exist.)
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    checks.allow_header_conformance,
]


@schema.exclude(path="/v1/events").parametrize()  # an endless stream by design
@hypothesis.settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(hypothesis.HealthCheck),
    database=None,
)
def test_generated_requests_get_documented_answers(
    case: schemathesis.Case, server: tuple[Server, str]
) -> None:
    running, key = server
    case.call_and_validate(
        base_url=running.url,
        headers={"Authorization": f"Bearer {key}"},
        timeout=15,
        checks=CHECKS,
    )
