"""A task request (`domain.requests.TaskRequest`): what its constructor checks, what a
REST body makes of it, and its fingerprint, which must not change across versions
(tasks stored with an idempotency key hold it)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from taskservice.api.schemas import TaskCreate, TaskTemplate
from taskservice.domain.agent_options import AgentOptions, effective
from taskservice.domain.content import canonical
from taskservice.domain.errors import InvalidRequest
from taskservice.domain.requests import TaskRequest
from taskservice.domain.states import TaskState
from taskservice.domain.webhooks import WebhookRequest


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"priority": True}, "priority"),
        ({"priority": "3"}, "priority"),
        ({"priority": 1001}, "priority"),
        ({"run_at": "2026-12-01T09:00:00"}, "run_at"),  # no offset
        ({"run_at": "tomorrow"}, "run_at"),
        ({"run_at": 5}, "run_at"),
    ],
)
def test_scheduling_is_checked_as_the_request_is_built(given: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        TaskRequest(tenant="t", input="x", **given)
    assert refused.value.extensions["field"] == field
    assert refused.value.detail.startswith(f"{field} ")  # A2A names it `metadata.<field>`


def test_a_built_request_holds_its_values_as_their_types_say() -> None:
    request = TaskRequest(
        tenant="t",
        input="x",
        metadata=None,  # type: ignore[arg-type]  # as a caller without metadata may pass
        run_at="2026-12-01T11:00:00+02:00",  # type: ignore[arg-type]  # JSON's text
        priority=-1000,
        webhooks=[WebhookRequest(url="https://a.example/h")],
    )
    assert request.run_at == datetime(2026, 12, 1, 9, tzinfo=UTC)
    assert request.priority == -1000
    assert request.metadata == {}
    assert request.webhooks == (WebhookRequest(url="https://a.example/h"),)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.priority = 1  # type: ignore[misc]


def test_a_rest_body_is_the_request_of_its_fields() -> None:
    parent = uuid.uuid4()
    body = TaskCreate.model_validate(
        {
            "input": {"q": 1},
            "system_prompt": "sp",
            "agent": "demo",
            "model": "m",
            "metadata": {"k": "v"},
            "context_id": "c",
            "max_attempts": 2,
            "timeout_seconds": 3.5,
            "priority": 4,
            "parent_id": str(parent),
            "detached": True,
            "webhooks": [{"url": "https://a.example/h", "states": ["completed"]}],
            "run_at": "2026-12-01T11:00:00+02:00",
        }
    )
    assert body.request("t", "key") == TaskRequest(
        tenant="t",
        input={"q": 1},
        system_prompt="sp",
        agent="demo",
        model="m",
        metadata={"k": "v"},
        parent_id=parent,
        context_id="c",
        max_attempts=2,
        timeout_seconds=3.5,
        idempotency_key="key",
        webhooks=(WebhookRequest(url="https://a.example/h", states=(TaskState.COMPLETED,)),),
        detached=True,
        priority=4,
        run_at=datetime(2026, 12, 1, 9, tzinfo=UTC),
    )


def test_every_field_of_a_schedules_template_is_a_request_field() -> None:
    """A schedule stores its template as JSON and fires `TaskRequest(**template)`."""
    names = {f.name for f in dataclasses.fields(TaskRequest)}
    assert set(TaskTemplate.model_fields) <= names
    assert set(TaskCreate.model_fields) <= names


def _fingerprint(request: TaskRequest) -> str:
    options = effective(
        AgentOptions(request.system_prompt, request.model, request.agent), request.metadata
    )
    return request.fingerprint(
        options, input_json=canonical(request.input), metadata_json=canonical(request.metadata)
    )


# Computed by the submit of the version before TaskRequest existed: they must not change.
@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"input": "hello"}, "e45cb9075ca66ef715260a191103c20ca967f76aded628fe1b45ce1a82b044f3"),
        (
            {"input": {"b": 1, "a": [1, 2.5, "é"]}, "metadata": {"z": 1, "a": {"y": None}}},
            "721b39232e7869ea54746c5733e6e09ec3c115f347da725ea710b119c2143ac9",
        ),
        (
            {
                "input": "x",
                "system_prompt": "sp",
                "agent": "demo",
                "model": "m1",
                "metadata": {"k": "v"},
                "parent_id": uuid.UUID("01900000-0000-7000-8000-000000000001"),
                "context_id": "c1",
                "max_attempts": 3,
                "timeout_seconds": 2.5,
                "detached": True,
                "priority": -7,
                "run_at": "2026-12-01T11:00:00+02:00",
                "webhooks": [
                    WebhookRequest(url="https://a.example/h"),
                    WebhookRequest(
                        url="https://b.example/h",
                        states=(TaskState.COMPLETED, TaskState.FAILED),
                        secret="whsec_abc",
                    ),
                ],
            },
            "5efc011555c8d6673cc22a397c669228beff5cac4089080a4a3ff2b3241fea57",
        ),
        (
            {
                "input": "x",
                "metadata": {"config_name": "demo", "model_name": "m", "system_prompt": "s"},
            },
            "da749e746f408795d564c5eded5f516c87207c7aeef0d13061a82dfe5c039845",
        ),
        (
            {
                "input": "x",
                "run_at": datetime(2030, 1, 2, 3, 4, 5, 600000, timezone(timedelta(hours=-5))),
                "priority": 1000,
            },
            "06fdb61f4bdb14c6c7c65676c64e74a868187c9471f8ae2a17e54d9272d7a237",
        ),
    ],
)
def test_the_fingerprint_is_the_one_stored_before(given: dict[str, Any], expected: str) -> None:
    assert _fingerprint(TaskRequest(tenant="t", idempotency_key="k", **given)) == expected


def test_the_fingerprint_tells_requests_apart_but_not_the_tenant_or_quiet() -> None:
    base = TaskRequest(tenant="t", input="x", idempotency_key="k")
    assert _fingerprint(base) != _fingerprint(dataclasses.replace(base, input="y"))
    assert _fingerprint(base) != _fingerprint(dataclasses.replace(base, priority=1))
    assert _fingerprint(base) == _fingerprint(dataclasses.replace(base, tenant="u", quiet=True))
