"""The console's run page at /ui/#/runs/<id> in a real browser, against a live server:
the answer as it is written, the controls (cancel through a confirmation, answer a
question, pause and resume, approve or deny a tool call), the timeline, the subtask
tree, webhook deliveries, attempts made and lost, a missing task, a huge input, a
phone's width, and task content never run as markup."""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import Page, expect
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.agents.demo import QUESTION
from taskservice.db.keys import ApiKeyStore
from taskservice.db.leases import LeaseStore
from taskservice.db.tasks import TaskStore
from tests.browser.conftest import XSS, Console, screenshot, serving, submit
from tests.conftest import LiveFactory, wait_for
from tests.fakes.webhook_receiver import Receiver
from tests.integration.helpers import expire
from tests.integration.test_approvals import lookup, profiles, refund, refunder, returns

SECTIONS = "#conversation, #timeline, #subtasks, #deliveries, #events, #run-head"


async def stored(url: str, task_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url) as client:
        return (await client.get(f"/v1/tasks/{task_id}")).json()  # type: ignore[no-any-return]


def state(page: Page) -> Any:
    return page.locator("#run-head .state")


async def test_the_answer_is_shown_as_it_is_written_then_persisted(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    # The page is served by a replica without workers: what it shows comes from the
    # worker's replica through PostgreSQL.
    async with (
        make_live(workers_enabled=True) as worker,
        serving(make_live, page, workers=False) as live,
    ):
        task = await submit(worker.url, {"agent": "demo", "input": "take 6s, spawn 1"})
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        # The answer's text (not a tool call's arguments, shown muted).
        writing = page.locator("#writing .bubble.live pre:not(.muted)").first
        await expect(writing).to_be_visible(timeout=15_000)
        await expect(page.locator("#writing .caret")).to_be_visible()
        first = await writing.inner_text()
        await asyncio.sleep(0.5)
        later = await writing.inner_text()
        assert later.startswith(first)
        assert len(later) > len(first)  # it grows as the model writes
        await page.evaluate("document.getElementById('writing').scrollIntoView({block: 'end'})")
        await screenshot(page, "console-run-streaming", full_page=False)
        result = page.locator("#result")
        await expect(result).to_contain_text("This is the demo agent", timeout=15_000)
        done = await stored(live.url, task["id"])
        assert (await result.inner_text()).strip() == done["result"]
        await expect(page.locator("#writing .bubble")).to_have_count(0)  # now persisted
        answer = page.locator("#conversation .bubble.response .part.text").last
        await expect(answer).to_contain_text(done["result"][:40])
        await expect(state(page)).to_have_text("completed")
        await expect(page.locator("#subtasks li")).to_have_count(1)
        assert await page.evaluate("performance.getEntriesByType('navigation').length") == 1
        assert console.errors == []


async def test_the_timeline_draws_attempts_model_requests_and_tool_calls_to_scale(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        task = await submit(live.url, {"agent": "demo", "input": "take 1.5s, spawn 1"})
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        await expect(state(page)).to_have_text("completed", timeout=15_000)
        timeline = page.locator("#timeline")
        # Parked while its subtask ran: two attempts, each a bar.
        await expect(timeline.locator(".bar.attempt")).to_have_count(2, timeout=5_000)
        # report_progress twice, spawn_subtask, wait_for_subtasks: four calls, done.
        await expect(timeline.locator(".bar.call.completed")).to_have_count(4)
        await expect(timeline.locator(".bar.request")).not_to_have_count(0)
        boxes = await timeline.locator(".bar").evaluate_all(
            "bars => bars.map(b => [b.getBoundingClientRect().width,"
            " b.parentElement.getBoundingClientRect().width])"
        )
        assert all(0 < width <= track + 0.5 for width, track in boxes)
        # To scale: the attempts together are longer than any one tool call.
        widths = await timeline.locator(".bar.attempt").evaluate_all(
            "bars => bars.map(b => b.getBoundingClientRect().width)"
        )
        call_widths = await timeline.locator(".bar.call").evaluate_all(
            "bars => bars.map(b => b.getBoundingClientRect().width)"
        )
        assert sum(widths) > max(call_widths)
        # The conversation: the prompt, tool calls with their arguments as indented JSON.
        conversation = page.locator("#conversation")
        await expect(conversation.locator(".part.user-prompt")).to_contain_text("take 1.5s")
        call = conversation.locator('.part.tool-call[data-tool="report_progress"]').first
        await expect(call.locator("pre")).to_contain_text('"percent": 10')
        await expect(conversation.locator(".part.tool-return")).not_to_have_count(0)
        # The ledger's calls, with their arguments and results.
        await expect(page.locator("#calls tbody tr")).to_have_count(4)
        await expect(page.locator('#calls tr:has-text("spawn_subtask")')).to_contain_text(
            "completed"
        )
        assert console.errors == []


async def test_a_completed_run_for_the_docs(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        task = await submit(live.url, {"agent": "demo", "input": "take 2s"})
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        await expect(state(page)).to_have_text("completed", timeout=15_000)
        await expect(page.locator("#conversation .part.tool-call")).not_to_have_count(0)
        await expect(page.locator("#timeline .bar.call")).to_have_count(2)
        await screenshot(page, "console-run", full_page=False, docs=True)
        assert console.errors == []


async def test_the_subtask_tree_follows_its_subtasks_live(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        task = await submit(live.url, {"agent": "demo", "input": "spawn 2, take 8s"})
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        tree = page.locator("#subtasks ul.tree > li")
        await expect(tree).to_have_count(2, timeout=10_000)
        # Waiting for them, the parent does not read as needing a person.
        await expect(state(page)).to_have_text("waiting for subtasks", timeout=5_000)
        await expect(tree.locator(".state").first).to_have_text("running")
        await expect(tree.locator('.state[data-state="completed"]')).to_have_count(
            2, timeout=15_000
        )
        await expect(state(page)).to_have_text("completed", timeout=15_000)
        child = await tree.first.get_attribute("data-task")
        await tree.first.locator("a").click()
        await expect(page).to_have_url(f"{live.url}/ui/#/runs/{child}")
        await expect(page.locator("#run-head a.parent")).to_have_text(task["id"])
        assert console.errors == []


async def test_a_running_task_is_cancelled_from_its_page_through_a_confirmation(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        task = await submit(live.url, {"agent": "demo", "input": "take 60s"})
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        await expect(state(page)).to_have_text("running", timeout=10_000)
        # A follow-up message, queued for the run's next model request.
        followup = page.locator("#followup")
        await followup.locator("textarea").fill("and keep it short")
        await followup.get_by_role("button", name="Send").click()
        await expect(followup.locator("[role=status]")).to_contain_text("Queued")
        assert (await stored(live.url, task["id"]))["followups"] == 1
        await page.click("#run-controls #cancel")
        dialog = page.locator("#run-controls dialog[open]")
        await expect(dialog).to_contain_text("subtasks that are still running")
        # Keeping it changes nothing.
        await dialog.get_by_role("button", name="Keep it").click()
        await expect(dialog).to_have_count(0)
        assert (await stored(live.url, task["id"]))["state"] == "running"
        await page.click("#run-controls #cancel")
        await dialog.locator("input[name=reason]").fill("seen enough")
        await dialog.get_by_role("button", name="Cancel the run").click()
        await expect(state(page)).to_have_text("cancelled")
        await expect(page.locator("#cancel")).to_have_count(0)
        await expect(page.locator("#run-head .cancel-reason")).to_contain_text("seen enough")
        after = await stored(live.url, task["id"])
        assert (after["state"], after["cancel_reason"]) == ("cancelled", "seen enough")
        assert console.errors == []


async def test_a_question_is_answered_from_the_page(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        task = await submit(live.url, {"agent": "demo", "input": "ask me, take 1s"})
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        form = page.locator("#answer")
        await expect(form).to_contain_text(QUESTION, timeout=10_000)
        await expect(state(page)).to_have_text("needs you")
        await expect(page.locator("#followup")).to_have_count(0)  # the form answers
        await screenshot(page, "console-run-question", full_page=False)
        await form.locator("textarea").fill("ultramarine")
        await form.get_by_role("button", name="Answer").click()
        await expect(page.locator("#result")).to_contain_text(
            "written in ultramarine", timeout=15_000
        )
        await expect(state(page)).to_have_text("completed")
        await expect(form).to_have_count(0)
        # Claimed again after the answer: a second attempt, and none lost.
        head = page.locator("#run-head")
        await expect(head.locator(".attempts")).to_have_text("attempt 2")
        await expect(head.locator(".lost")).to_have_count(0)
        assert "lost" not in await head.inner_text()
        assert console.errors == []


async def test_a_lost_lease_shows_attempts_made_and_lost_apart(
    make_live: LiveFactory, page: Page, console: Console, db: AsyncEngine, store: TaskStore
) -> None:
    async with serving(make_live, page, workers=False) as live:
        task = await submit(live.url, {"agent": "demo", "input": "take 1s", "max_attempts": 3})
        # A worker claims it and dies: its lease expires and the reaper takes it back.
        leases = LeaseStore(store.db)
        [claimed] = await leases.claim(owner="dead-worker", limit=1, lease_seconds=30)
        assert str(claimed.id) == task["id"]
        await expire(db, claimed.id)
        assert await leases.reap(log_cap=10) == (1, [])
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        head = page.locator("#run-head")
        await expect(head.locator(".attempts")).to_have_text("attempt 1")
        await expect(head.locator(".lost")).to_contain_text("1 lost (lease expired) of at most 3")
        await expect(page.locator("#timeline .bar.attempt.lost")).to_have_count(1)
        # Another worker takes it on and finishes it, the page following live.
        async with make_live(workers_enabled=True):
            await expect(state(page)).to_have_text("completed", timeout=15_000)
        await expect(head.locator(".attempts")).to_have_text("attempt 2")
        await expect(head.locator(".lost")).to_contain_text("1 lost")
        await expect(page.locator("#timeline .bar.attempt")).to_have_count(2)
        assert console.errors == []


async def test_a_run_out_of_attempts_shows_its_error_and_no_controls(
    make_live: LiveFactory, page: Page, console: Console, db: AsyncEngine, store: TaskStore
) -> None:
    async with serving(make_live, page, workers=False) as live:
        task = await submit(live.url, {"agent": "demo", "input": "take 1s", "max_attempts": 1})
        leases = LeaseStore(store.db)
        [claimed] = await leases.claim(owner="dead-worker", limit=1, lease_seconds=30)
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        await expect(state(page)).to_have_text("running")
        await expect(page.locator("#run-controls #cancel")).to_be_visible()
        await expire(db, claimed.id)
        await leases.reap(log_cap=10)
        # Followed live: failed, saying why, with nothing left to do to it.
        await expect(state(page)).to_have_text("failed", timeout=5_000)
        error = page.locator("#run-head .run-error")
        await expect(error).to_contain_text("attempts_exhausted")
        await expect(error).to_contain_text("dead-worker")
        await expect(page.locator("#run-head .lost")).to_contain_text("1 lost (lease expired)")
        await expect(page.locator("#cancel, #followup, #answer")).to_have_count(0)
        await expect(page.locator("#timeline .bar.attempt.failed")).to_have_count(1)
        assert console.errors == []


async def test_a_scheduled_run_says_when_and_can_be_cancelled_before(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page, workers=False) as live:
        task = await submit(
            live.url,
            {"agent": "demo", "input": "later", "run_at": "2099-01-01T00:00:00Z", "priority": 7},
        )
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        await expect(state(page)).to_have_text("scheduled")
        head = page.locator("#run-head")
        await expect(head.locator(".run-at")).to_contain_text("2099")
        await expect(head).to_contain_text("not started")
        await expect(page.locator(".timeline-section")).to_contain_text("Nothing has run yet")
        await expect(page.locator("#run-controls #cancel")).to_be_visible()
        assert console.errors == []


async def test_a_webhook_delivery_is_shown_with_its_url_and_attempts_and_redelivered(
    make_live: LiveFactory, page: Page, console: Console, receiver: Receiver
) -> None:
    hooks = {"webhook_allow_http": True, "webhook_allow_targets": ["127.0.0.1/32"]}
    async with serving(make_live, page, **hooks) as live:
        hook = {"url": receiver.url("/alerts"), "states": ["completed"]}
        task = await submit(live.url, {"agent": "demo", "input": "take 0.5s", "webhooks": [hook]})
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        delivery = page.locator("#deliveries tr[data-delivery]")
        await expect(delivery).to_contain_text("succeeded", timeout=15_000)
        await expect(delivery.locator(".url")).to_have_text(receiver.url("/alerts"))
        await expect(delivery.locator("li")).to_have_count(1)  # attempt #1
        await expect(delivery.locator("li")).to_contain_text("#1 200")
        await delivery.get_by_role("button", name="Redeliver").click()
        dialog = delivery.locator("dialog[open]")
        await expect(dialog).to_contain_text(receiver.url("/alerts"))
        await dialog.get_by_role("button", name="Redeliver").click()
        await expect(delivery.locator("li")).to_have_count(2, timeout=10_000)
        await expect(delivery.locator("li").nth(1)).to_contain_text("#2 200")
        assert len(receiver.at("/alerts")) == 2
        assert len({r.webhook_id for r in receiver.at("/alerts")}) == 1  # the same delivery
        assert console.errors == []


async def test_signing_in_keeps_the_key_out_of_every_url(
    make_live: LiveFactory, page: Page, console: Console, db: AsyncEngine
) -> None:
    key, _ = await ApiKeyStore(db).create(tenant="acme", name="browser")
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    async with serving(make_live, page) as live:
        task = await submit(live.url, {"agent": "demo", "input": "take 1s"}, key)
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        await page.fill("input[name=key]", key)
        await page.click(".signin button")
        # The run's page follows its events live, through a stream token.
        await expect(state(page)).to_have_text("completed", timeout=15_000)
        await expect(page.locator("#result")).to_contain_text("demo agent")
        assert await page.evaluate("sessionStorage.getItem('taskservice.apiKey')") == key
        assert any(f"/v1/tasks/{task['id']}/events?" in u and "token=" in u for u in urls)
        assert not [url for url in urls if key in url]
        await page.click(".sign-out")
        await expect(page.locator(".signin")).to_be_visible()
        # A 401 is what a signed-out page is told; the browser reports the response.
        console.errors[:] = [e for e in console.errors if "401" not in e]
        assert console.errors == []


async def test_a_bad_or_unknown_id_says_so_once_with_no_empty_sections(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page, workers=False) as live:
        for missing in ["not-a-task", str(uuid.uuid4())]:
            await page.goto(f"{live.url}/ui/#/runs/{missing}")
            alert = page.locator(".run [role=alert]")
            await expect(alert).to_have_text(f"No task {missing}")
            await expect(page.locator(SECTIONS)).to_have_count(0)
            await expect(page.locator(".run h2")).to_have_count(0)
        # The API's 404 / 422 answers are what the browser reports; nothing else.
        console.errors[:] = [e for e in console.errors if "404" not in e and "422" not in e]
        assert console.errors == []


async def test_a_250_kb_input_keeps_the_page_short(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    huge = "\n".join(f"line {n}: " + "lorem ipsum " * 20 for n in range(1000))
    assert len(huge) > 250_000
    async with serving(make_live, page) as live:
        task = await submit(live.url, {"agent": "demo", "input": huge})
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        # Its input, its prompt in the conversation and its result, each folded.
        await expect(state(page)).to_have_text("completed", timeout=20_000)
        await expect(page.locator("#conversation .part.user-prompt")).to_have_count(1)
        height = await page.evaluate("document.documentElement.scrollHeight")
        assert height < 3000, height
        show = page.locator("#input button", has_text="Show all")
        await expect(show).to_contain_text("KB")
        await show.click()
        assert await page.evaluate("document.documentElement.scrollHeight") > 3000
        assert console.errors == []


async def test_nothing_overflows_a_phone_width(
    make_live: LiveFactory, page: Page, console: Console, receiver: Receiver
) -> None:
    hooks = {"webhook_allow_http": True, "webhook_allow_targets": ["127.0.0.1/32"]}
    await page.set_viewport_size({"width": 375, "height": 800})
    async with serving(make_live, page, **hooks) as live:
        hook = {
            "url": receiver.url("/a/rather/long/path/for/a/narrow/screen"),
            "states": ["running", "completed"],
        }
        task = await submit(
            live.url,
            {
                "agent": "demo",
                "input": "spawn 1, take 1s, " + "x" * 300,
                "context_id": "a-context-with-a-long-name-" + "y" * 60,
                "metadata": {"k" * 80: "v" * 200},
                "webhooks": [hook],
            },
        )
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        await expect(state(page)).to_have_text("completed", timeout=15_000)
        await expect(page.locator("#deliveries tr[data-delivery]")).not_to_have_count(0)
        context = page.locator("#run-head a.context")
        await expect(context).to_have_attribute(
            "href", re.compile(r"^#/runs\?context_id=a-context-")
        )
        await page.locator("#events summary").click()
        await expect(page.locator("#events tbody tr")).not_to_have_count(0)
        await asyncio.sleep(0.3)
        assert await page.evaluate("document.documentElement.scrollWidth") <= 375
        await screenshot(page, "console-run-phone")
        assert console.errors == []


def xss_model() -> FunctionModel:
    """A model whose question, tool arguments and answer all carry markup."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        answered = any(
            getattr(part, "tool_name", None) == "ask_user" and hasattr(part, "content")
            for message in messages
            for part in message.parts
        )
        if not answered:
            call = ToolCallPart("ask_user", {"question": f"Which? {XSS}"}, tool_call_id="q1")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(f"done {XSS}")])

    return FunctionModel(respond)


async def test_no_task_content_runs_as_script_on_the_page(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    models = {"xss": xss_model()}
    async with serving(make_live, page, models=models, default_model="xss") as live:
        task = await submit(live.url, {"input": XSS, "metadata": {"note": XSS}, "model": "xss"})
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        form = page.locator("#answer")
        await expect(form.locator(".asked")).to_have_text(f"Which? {XSS}", timeout=10_000)
        await form.locator("textarea").fill(XSS)
        await form.get_by_role("button", name="Answer").click()
        await expect(page.locator("#result")).to_contain_text(f"done {XSS}", timeout=15_000)
        await expect(page.locator("#input")).to_contain_text(XSS)
        await expect(page.locator("#metadata")).to_contain_text("<img src=x")
        call = page.locator('#conversation .part.tool-call[data-tool="ask_user"]')
        await expect(call).to_contain_text("<img src=x")
        await page.locator("#events summary").click()
        await asyncio.sleep(0.5)
        assert await page.evaluate("window.__xss") is None
        assert await page.locator(".run img, .run script").count() == 0
        assert not [e for e in console.errors if "Content Security Policy" in e]
        assert console.errors == []


async def test_a_run_is_forked_from_a_message_with_its_text_edited(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    """`edit & fork` on the prompt makes a new run with the edited text; `fork from
    here` after the answered question makes one that does not ask it again; each
    fork's page says what it was forked from, the source's lists its forks."""
    async with serving(make_live, page) as live:
        task = await submit(live.url, {"agent": "demo", "input": "ask me, take 1s"})
        async with httpx.AsyncClient(base_url=live.url) as client:
            asked = (await client.get(f"/v1/tasks/{task['id']}", params={"wait": 10})).json()
            assert asked["state"] == "input_required"
            answer = {"answer": "teal"}
            response = await client.post(f"/v1/tasks/{task['id']}/input", json=answer)
            assert response.status_code == 200, response.text
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        await expect(state(page)).to_have_text("completed", timeout=15_000)
        bubbles = page.locator("#conversation .bubble")
        await expect(bubbles).to_have_count(8)
        # Between a tool call and its result there is nothing to offer.
        await expect(bubbles.nth(3).locator(".fork-after")).to_have_count(0)

        # After the answer to the question (#4): the question is not asked again.
        await bubbles.nth(4).locator(".fork-after").click()
        dialog = page.locator("dialog[open]")
        await expect(dialog).to_contain_text("first 5 messages")
        await dialog.get_by_role("button", name="Fork").click()
        await expect(page.locator("#run-head .forked-from")).to_contain_text(task["id"])
        await expect(page.locator("#run-head .forked-from")).to_contain_text("at #5")
        await expect(state(page)).to_have_text("completed", timeout=15_000)
        await expect(page.locator("#result")).to_contain_text("written in teal")
        forked = page.url.rsplit("/", 1)[1]

        # Edit the prompt: a fork at 0 with the new text, which asks again.
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        await expect(page.locator("#forks li")).to_have_count(1)
        await expect(page.locator("#forks")).to_contain_text("at #5")
        await bubbles.nth(0).locator(".fork-edit").click()
        text = page.locator("dialog[open] textarea")
        await expect(text).to_have_value("ask me, take 1s")
        await text.fill("ask me again, in French, take 1s")
        await screenshot(page, "console-run-fork", full_page=False, docs=True)
        await text.fill(f"ask me again {XSS}, take 1s")
        await page.locator("dialog[open]").get_by_role("button", name="Fork").click()
        await expect(page.locator("#answer")).to_contain_text(QUESTION, timeout=15_000)
        await expect(page.locator("#input")).to_contain_text("ask me again")
        edited = page.url.rsplit("/", 1)[1]
        assert edited not in (forked, task["id"])
        stored_fork = await stored(live.url, edited)
        assert stored_fork["forked_from"] == {"task_id": task["id"], "at": 0}

        # The bar's Fork after the model's answer needs a message.
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        await expect(page.locator("#forks li")).to_have_count(2)
        await page.locator("#fork").click()
        dialog = page.locator("dialog[open]")
        await expect(dialog).to_contain_text("your message (needed here)")
        await dialog.get_by_role("button", name="Fork").click()
        await expect(dialog.locator(".error")).to_contain_text("Write the message")
        await dialog.locator("textarea").fill("and once more")
        await dialog.get_by_role("button", name="Fork").click()
        await expect(page.locator("#run-head .forked-from")).to_contain_text("at #8")
        assert console.errors == []


async def events_of(url: str, task_id: str, *types: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url) as client:
        page = await client.get(f"/v1/tasks/{task_id}/events", params={"type": list(types)})
    return page.json()["events"]  # type: ignore[no-any-return]


async def test_a_running_task_is_paused_and_resumed_from_its_page(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live:
        task = await submit(live.url, {"agent": "demo", "input": "take 20s"})
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        await expect(state(page)).to_have_text("running", timeout=10_000)
        await expect(page.locator("#resume")).to_have_count(0)
        await page.click("#run-controls #pause")
        dialog = page.locator("#run-controls dialog[open]")
        await expect(dialog).to_contain_text("gives its worker back")
        await dialog.locator("input[name=reason]").fill("a look first")
        await dialog.get_by_role("button", name="Pause the run").click()
        # The state stays the state; the hold is beside it, and the head says whose.
        head = page.locator("#run-head")
        await expect(head.locator(".paused-mark")).to_have_text("paused")
        await expect(state(page)).to_have_text("running")
        await expect(head.locator("#paused")).to_contain_text("a look first")
        await expect(head.locator("#paused .by")).to_have_text("open")
        await expect(page.locator("#pause")).to_have_count(0)
        held = await stored(live.url, task["id"])
        assert held["paused"]["reason"] == "a look first"
        assert held["paused"]["scope"] == "task"

        # Its run gives the worker back.
        async def released() -> bool:
            gone = await events_of(live.url, task["id"], "released")
            return any(e["data"].get("reason") == "paused" for e in gone)

        await wait_for(released, timeout=10)
        await screenshot(page, "console-run-paused", full_page=False)
        await page.click("#run-controls #resume")
        await expect(head.locator(".paused-mark")).to_have_count(0)
        await expect(head.locator("#paused")).to_have_count(0)
        await expect(page.locator("#pause")).to_be_visible()
        assert (await stored(live.url, task["id"]))["paused"] is None
        # The run goes on (its answer is written), then completes.
        await expect(page.locator("#writing .bubble.live")).to_be_visible(timeout=20_000)
        await expect(state(page)).to_have_text("completed", timeout=20_000)
        assert console.errors == []


async def test_a_pause_made_elsewhere_reaches_the_page_from_its_events(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page, workers=False) as live:
        task = await submit(live.url, {"agent": "demo", "input": "take 1s"})
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        await expect(state(page)).to_have_text("pending")
        await asyncio.sleep(0.3)  # the page's stream is open
        async with httpx.AsyncClient(base_url=live.url) as client:
            paused = await client.post(f"/v1/tasks/{task['id']}/pause", json={"reason": XSS})
            assert paused.status_code == 200, paused.text
            mark = page.locator("#run-head .paused-mark")
            await expect(mark).to_be_visible(timeout=5_000)
            await expect(page.locator("#paused .reason")).to_have_text(XSS)
            await client.post(f"/v1/tasks/{task['id']}/resume")
            await expect(mark).to_have_count(0, timeout=5_000)
        assert await page.evaluate("window.__xss") is None
        assert await page.locator(".run img, .run script").count() == 0
        assert console.errors == []


async def test_a_tool_call_is_approved_with_edited_arguments_from_the_page(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    posted: list[str] = []
    page.on("request", lambda r: posted.append(r.url) if r.method == "POST" else None)
    async with serving(make_live, page) as live:
        task = await submit(live.url, {"agent": "demo", "input": "approve, take 1s"})
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        card = page.locator('#approvals .approval[data-tool="publish"]')
        await expect(card).to_be_visible(timeout=10_000)
        await expect(state(page)).to_have_text("needs approval")
        await expect(card.locator(".note")).to_contain_text("approve it, edit the channel")
        await expect(card.locator(".arguments pre")).to_contain_text('"channel": "#demo"')
        await expect(page.locator("#followup")).to_have_count(0)
        await card.get_by_text("Edit the arguments").click()
        editor = card.locator("textarea[name=arguments]")
        await expect(editor).to_have_value(re.compile(r'"channel": "#demo"'))
        await editor.fill('{"channel": "#ops", "text": "hi"')  # not JSON: refused here
        await card.get_by_role("button", name="Approve with these arguments").click()
        await expect(card.locator("[role=alert]")).to_contain_text("not JSON")
        assert not [url for url in posted if url.endswith("/input")]
        # JSON that does not fit the tool's schema: the server's 422, said in the card.
        await editor.fill('{"channel": 5}')
        await card.get_by_role("button", name="Approve with these arguments").click()
        alert = card.locator("[role=alert]")
        await expect(alert).to_contain_text("do not fit its schema")
        await expect(alert).to_contain_text("'text' is a required property")
        assert (await stored(live.url, task["id"]))["state"] == "input_required"
        await editor.fill('{"channel": "#ops", "text": "hi"}')
        await screenshot(page, "console-run-approval", full_page=False, docs=True)
        await card.get_by_role("button", name="Approve with these arguments").click()
        await expect(page.locator("#result")).to_contain_text("published to #ops", timeout=15_000)
        await expect(state(page)).to_have_text("completed")
        await expect(page.locator("#approvals")).to_have_count(0)
        # The decision, on the call in the conversation and in the calls table.
        call = page.locator('#conversation .part.tool-call[data-tool="publish"]')
        await expect(call.locator(".approval-said")).to_have_text(
            "approved by open, arguments edited"
        )
        await expect(call.locator(".made-with")).to_contain_text('"#ops"')
        row = page.locator('#calls tr:has-text("publish")')
        await expect(row.locator(".approval-said")).to_contain_text("approved")
        (publish,) = [c for c in await calls_of(live.url, task["id"]) if c["name"] == "publish"]
        assert publish["approval"]["arguments"] == {"channel": "#ops", "text": "hi"}
        # The browser reports the 422 it was answered; nothing else.
        assert [e for e in console.errors if "422" not in e] == []


async def calls_of(url: str, task_id: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url) as client:
        return (await client.get(f"/v1/tasks/{task_id}/calls")).json()["calls"]  # type: ignore[no-any-return]


async def test_a_tool_call_is_denied_with_a_reason_and_nothing_it_carries_runs(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    await page.set_viewport_size({"width": 375, "height": 800})  # and on a phone
    async with serving(make_live, page) as live:
        task = await submit(live.url, {"agent": "demo", "input": f"approve {XSS}, take 1s"})
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        card = page.locator('#approvals .approval[data-tool="publish"]')
        await expect(card.locator(".arguments pre")).to_contain_text("<img src=x", timeout=10_000)
        await card.get_by_text("Edit the arguments").click()
        await asyncio.sleep(0.3)
        assert await page.evaluate("document.documentElement.scrollWidth") <= 375
        await card.locator("input[name=reason]").fill(f"not today {XSS}")
        await card.get_by_role("button", name="Deny").click()
        result = page.locator("#result")
        await expect(result).to_contain_text("did not approve", timeout=15_000)
        await expect(result).to_contain_text(f"not today {XSS}")
        call = page.locator('#conversation .part.tool-call[data-tool="publish"]')
        await expect(call.locator(".approval-said")).to_have_text(
            f"denied by open: not today {XSS}"
        )
        await asyncio.sleep(0.3)
        assert await page.evaluate("window.__xss") is None
        assert await page.locator(".run img, .run script").count() == 0
        assert console.errors == []


async def test_calls_of_one_response_are_decided_one_by_one_before_a_deadline(
    make_live: LiveFactory, page: Page, console: Console, tmp_path: Path
) -> None:
    async with serving(
        make_live,
        page,
        models={"refunder": refunder(("A-1", 500), ("A-2", 300))},
        tools={"refund": refund, "lookup": lookup},
        agents_file=profiles(tmp_path, "approval_timeout_seconds = 3600"),
    ) as live:
        body = {"agent": "billing", "model": "refunder", "input": "refund A-1 and A-2"}
        task = await submit(live.url, body)
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        cards = page.locator("#approvals .approval")
        await expect(cards).to_have_count(2, timeout=10_000)
        await expect(page.locator("#approvals h2")).to_have_text(
            "2 tool calls wait for your approval"
        )
        await expect(page.locator("#approvals .deadline")).to_contain_text("undecided are denied")
        await expect(cards.first.locator(".note")).to_have_text("Refunds need a person.")
        await cards.first.get_by_role("button", name="Approve").click()
        # Decided, it says so; the task waits for the other.
        await expect(cards.first).to_have_class(re.compile(r"\bdecided\b"))
        await expect(cards.first.locator(".approval-said")).to_have_text("approved by open")
        await expect(page.locator("#approvals h2")).to_have_text(
            "A tool call waits for your approval"
        )
        assert (await stored(live.url, task["id"]))["state"] == "input_required"
        await cards.nth(1).locator("input[name=reason]").fill("too much")
        await cards.nth(1).get_by_role("button", name="Deny").click()
        result = page.locator("#result")
        await expect(result).to_contain_text("refunded 500 on A-1", timeout=15_000)
        await expect(result).to_contain_text("too much")
        await expect(page.locator("#calls .approval-said")).to_have_count(2)
        assert console.errors == []


def asks_and_refunds() -> FunctionModel:
    """Asks a question and calls `refund` in one response, then says what it got."""

    def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            ask = ToolCallPart("ask_user", {"question": "Which card?"}, tool_call_id="q1")
            pay = ToolCallPart("refund", {"order": "A-1", "amount": 200}, tool_call_id="r1")
            return ModelResponse(parts=[ask, pay])
        return ModelResponse(parts=[TextPart(" | ".join(returns(messages)))])

    return FunctionModel(play)


async def test_a_question_asked_with_a_call_is_answered_with_its_decision(
    make_live: LiveFactory, page: Page, console: Console, tmp_path: Path
) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text('[agents.billing]\ntools = ["ask_user", "refund"]\napprove = ["refund"]\n')
    async with serving(
        make_live,
        page,
        models={"asker": asks_and_refunds()},
        tools={"refund": refund},
        agents_file=agents,
    ) as live:
        task = await submit(live.url, {"agent": "billing", "model": "asker", "input": "refund"})
        await page.goto(f"{live.url}/ui/#/runs/{task['id']}")
        approvals = page.locator("#approvals")
        await expect(approvals.locator(".questions")).to_contain_text("Which card?", timeout=10_000)
        await expect(page.locator("#answer")).to_have_count(0)  # answered in the card
        card = approvals.locator('.approval[data-tool="refund"]')
        await card.get_by_role("button", name="Approve").click()
        await expect(card.locator("[role=alert]")).to_contain_text("Answer the agent's questions")
        assert (await stored(live.url, task["id"]))["state"] == "input_required"
        await approvals.locator("textarea[name=q1]").fill("the blue one")
        await card.get_by_role("button", name="Approve").click()
        result = page.locator("#result")
        await expect(result).to_contain_text("the blue one", timeout=15_000)
        await expect(result).to_contain_text("refunded 200 on A-1")
        assert console.errors == []
