"""The committed OpenAPI document is the one the app serves."""

from __future__ import annotations

import json
from pathlib import Path

from taskservice.api.app import create_app
from taskservice.settings import Settings

SPEC = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"
REGENERATE = "taskservice openapi -o openapi/openapi.json"


def current() -> dict[str, object]:
    return json.loads(json.dumps(create_app(Settings()).openapi(), sort_keys=True))


def test_committed_openapi_matches_the_app() -> None:
    committed = json.loads(SPEC.read_text())
    assert committed == current(), f"openapi/openapi.json is stale: run `{REGENERATE}`"


def test_every_operation_has_a_stable_id_and_documents_its_errors() -> None:
    spec = current()
    for path, operations in spec["paths"].items():  # type: ignore[attr-defined]
        for method, operation in operations.items():
            assert operation.get("operationId"), (method, path)
            if path.startswith("/v1/"):
                responses = operation["responses"]
                assert "401" in responses, (method, path)
                problem = responses["401"]["content"]["application/problem+json"]
                assert problem["schema"] == {"$ref": "#/components/schemas/Problem"}


def test_bearer_auth_is_declared() -> None:
    schemes = current()["components"]["securitySchemes"]  # type: ignore[index]
    assert schemes["HTTPBearer"]["scheme"] == "bearer"
