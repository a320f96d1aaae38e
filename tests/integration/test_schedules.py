"""Recurring schedules over REST: managing them, each slot firing exactly once
across replicas, missed slots after downtime, and a template that stops holding."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.tables import schedules, tasks
from tests.conftest import ClientFactory, wait_for

EVERY_SECOND = "* * * * * *"


async def create(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    body = {"cron": "0 9 * * MON-FRI", "task": {"input": "the digest"}, **body}
    response = await client.post("/v1/schedules", json=body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


async def slot_tasks(db: AsyncEngine, schedule_id: str) -> list[tuple[str, str]]:
    """(slot, task id) of every task the schedule started, by slot."""
    query = select(tasks.c.id, tasks.c.metadata["scheduled_by"]["slot"].astext).where(
        tasks.c.metadata["scheduled_by"]["schedule_id"].astext == schedule_id
    )
    async with db.connect() as conn:
        rows = (await conn.execute(query)).all()
    return sorted((slot, str(task_id)) for task_id, slot in rows)


async def test_a_schedule_is_created_read_listed_changed_and_deleted(
    make_client: ClientFactory,
) -> None:
    async with make_client() as client:
        made = await create(
            client, name="digest", timezone="Europe/Riga", task={"input": "x", "priority": 4}
        )
        assert made["description"] == "At 09:00 on Monday through Friday"
        assert made["task"] == {"input": "x", "priority": 4}
        assert made["missed"] == "latest"
        runs = [datetime.fromisoformat(r) for r in made["next_runs"]]
        assert len(runs) == 5
        assert runs == sorted(runs)
        assert runs[0] == datetime.fromisoformat(made["next_run_at"]) > datetime.now(UTC)
        riga = [r.astimezone(ZoneInfo("Europe/Riga")) for r in runs]
        assert {(r.hour, r.minute) for r in riga} == {(9, 0)}
        assert {r.isoweekday() for r in riga} <= {1, 2, 3, 4, 5}
        got = await client.get(f"/v1/schedules/{made['id']}")
        assert got.json() == made
        taken = await client.post(
            "/v1/schedules", json={"name": "digest", "cron": "* * * * *", "task": {"input": "y"}}
        )
        assert taken.status_code == 409
        other = await create(client)
        listed = (await client.get("/v1/schedules", params={"limit": 1})).json()
        assert [s["id"] for s in listed["schedules"]] == [other["id"]]
        older = await client.get("/v1/schedules", params={"cursor": listed["next_cursor"]})
        assert [s["id"] for s in older.json()["schedules"]] == [made["id"]]

        off = (await client.patch(f"/v1/schedules/{made['id']}", json={"enabled": False})).json()
        assert off["next_run_at"] is None
        assert off["next_runs"] == []
        hourly = await client.patch(
            f"/v1/schedules/{made['id']}", json={"enabled": True, "cron": "0 * * * *"}
        )
        assert hourly.status_code == 200, hourly.text
        next_run = datetime.fromisoformat(hourly.json()["next_run_at"])
        assert timedelta(0) < next_run - datetime.now(UTC) <= timedelta(hours=1)
        renamed = await client.patch(f"/v1/schedules/{other['id']}", json={"name": "digest"})
        assert renamed.status_code == 409

        assert (await client.delete(f"/v1/schedules/{made['id']}")).status_code == 204
        assert (await client.get(f"/v1/schedules/{made['id']}")).status_code == 404
        assert (await client.delete(f"/v1/schedules/{made['id']}")).status_code == 404


async def test_bad_schedules_are_refused_naming_the_field_and_change_nothing(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    async with make_client() as client:
        for body, field in (
            ({"cron": "61 * * * *"}, "cron"),
            ({"cron": "@daily"}, "cron"),
            ({"timezone": "Mars/Olympus"}, "timezone"),
            ({"task": {"input": "x", "agent": "nobody"}}, "task.agent"),
            ({"task": {"input": "x", "model": "openai:gpt-9"}}, "task.model"),
            ({"task": {"input": "x", "priority": 5000}}, "task.priority"),
            ({"task": {"input": "x", "run_at": "2030-01-01T00:00:00Z"}}, "task.run_at"),
            ({"missed": "sometimes"}, "missed"),
        ):
            refused = await client.post(
                "/v1/schedules", json={"cron": "* * * * *", "task": {"input": "x"}, **body}
            )
            assert refused.status_code == 422, (body, refused.text)
            assert refused.headers["content-type"] == "application/problem+json"
            assert field in refused.text, (field, refused.text)
        made = await create(client)
        for change in ({"cron": "nope"}, {"cron": None}, {"enabled": None}, {"task": None}):
            bad = await client.patch(f"/v1/schedules/{made['id']}", json=change)
            assert bad.status_code == 422, (change, bad.text)
            assert bad.headers["content-type"] == "application/problem+json"
        assert (await client.get(f"/v1/schedules/{made['id']}")).json() == made
        assert (await client.get("/v1/schedules/not-an-id")).status_code == 404
    async with db.connect() as conn:
        assert len((await conn.execute(select(schedules.c.id))).all()) == 1


async def test_each_slot_fires_exactly_once_across_two_replicas(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    async with make_client() as one, make_client() as two:
        created = datetime.now(UTC)
        made = await create(one, cron=EVERY_SECOND, task={"input": "tick"})

        async def three_fired() -> bool:  # both replicas' schedulers tick meanwhile
            return len(await slot_tasks(db, made["id"])) >= 3

        await wait_for(three_fired, timeout=30)
        await two.patch(f"/v1/schedules/{made['id']}", json={"enabled": False})
        disabled = datetime.now(UTC)
    fired = await slot_tasks(db, made["id"])
    slots = [datetime.fromisoformat(slot) for slot, _ in fired]
    # Every slot between the schedule's creation and its end, however fast the
    # machine: none twice, none skipped, none after it was disabled.
    assert len(slots) >= 3, fired
    assert created - timedelta(seconds=1) < slots[0], fired
    assert slots[-1] <= disabled, fired
    assert Counter(slots).most_common(1)[0][1] == 1  # no slot twice
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(slots))
    async with make_client() as client:
        got = (await client.get(f"/v1/schedules/{made['id']}")).json()
    assert datetime.fromisoformat(got["last_slot"]) == slots[-1]
    assert got["last_task_id"] == fired[-1][1]


async def test_missed_slots_follow_the_schedules_policy(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    # Hourly at a minute three minutes ago: its latest slot is late by more than the
    # minute a slot may be and still count as on time.
    latest = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=3)
    cron = f"{latest.minute} * * * *"
    async with make_client() as client:
        made = {
            missed: await create(client, cron=cron, missed=missed)
            for missed in ("all", "latest", "skip")
        }
        # As if every process had been down since the slot an hour before that.
        async with db.begin() as conn:
            await conn.execute(update(schedules).values(next_run_at=latest - timedelta(hours=1)))
        for schedule in made.values():
            await wait_for(lambda s=schedule: _moved_on(db, s["id"]), timeout=5)
    fired = {missed: await slot_tasks(db, s["id"]) for missed, s in made.items()}
    assert [datetime.fromisoformat(slot) for slot, _ in fired["all"]] == [
        latest - timedelta(hours=1),
        latest,
    ]
    assert [datetime.fromisoformat(slot) for slot, _ in fired["latest"]] == [latest]
    assert fired["skip"] == []


async def _moved_on(db: AsyncEngine, schedule_id: str) -> bool:
    async with db.connect() as conn:
        next_run_at = (
            await conn.execute(select(schedules.c.next_run_at).where(schedules.c.id == schedule_id))
        ).scalar_one()
    return bool(next_run_at > datetime.now(UTC))


async def test_a_slot_never_starts_a_second_task_and_a_broken_template_is_reported(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    async with make_client() as client:
        made = await create(client, cron=EVERY_SECOND)
        await wait_for(lambda: slot_tasks(db, made["id"]), timeout=5)
        await client.patch(f"/v1/schedules/{made['id']}", json={"enabled": False})
        [(slot, task_id)] = (await slot_tasks(db, made["id"]))[:1]
        # Set back to a slot that already fired (the constraint is the backstop).
        async with db.begin() as conn:
            await conn.execute(
                update(schedules)
                .where(schedules.c.id == made["id"])
                .values(enabled=True, next_run_at=datetime.fromisoformat(slot), missed="all")
            )
        await wait_for(lambda: _moved_on(db, made["id"]), timeout=5)
        fired = await slot_tasks(db, made["id"])
        assert Counter(s for s, _ in fired).most_common(1)[0][1] == 1
        assert (slot, task_id) in fired

        # The template stops holding (its profile is gone): the slot is skipped, said.
        async with db.begin() as conn:
            await conn.execute(
                text(
                    'UPDATE schedules SET task = task || \'{"agent": "gone"}\'::jsonb '
                    "WHERE id = :id"
                ),
                {"id": made["id"]},
            )
        before = len(await slot_tasks(db, made["id"]))
        got = await wait_for(lambda: _errored(client, made["id"]), timeout=5)
        assert "gone" in got["last_error"]["detail"]
        assert got["last_error"]["field"] == "agent"
        assert len(await slot_tasks(db, made["id"])) - before <= 1  # one may have been in flight


async def _errored(client: httpx.AsyncClient, schedule_id: str) -> dict[str, Any] | None:
    got: dict[str, Any] = (await client.get(f"/v1/schedules/{schedule_id}")).json()
    return got if got["last_error"] else None
