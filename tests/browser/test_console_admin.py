"""The console's admin pages in a real browser, against a live server: tenant
webhooks (#/webhooks), agent profiles (#/agents), API keys (#/keys)."""

from __future__ import annotations

import asyncio
import re

import httpx
from playwright.async_api import Page, expect

from tests.browser.conftest import XSS, Console, post, screenshot, serving
from tests.conftest import LiveFactory
from tests.fakes.webhook_receiver import Receiver

# What sticks out past 375 px, to say so when something does.
WIDER_THAN_A_PHONE = """[...document.querySelectorAll('main *')]
  .filter((e) => e.getBoundingClientRect().right > 376)
  .slice(0, 8).map((e) => `${e.tagName}.${e.className} ${e.getBoundingClientRect().right}`)"""
HOOKS = {"webhook_allow_http": True, "webhook_allow_targets": ["127.0.0.1/32"]}


async def confirm(page: Page, button: str) -> None:
    """Confirm in the open dialog with its `button`."""
    dialog = page.locator("dialog[open]")
    await expect(dialog).to_be_visible()
    await dialog.get_by_role("button", name=button).click()
    await expect(page.locator("dialog[open]")).to_have_count(0)


async def test_a_tenant_webhook_is_made_delivered_to_redelivered_disabled_and_deleted(
    make_live: LiveFactory, page: Page, console: Console, receiver: Receiver
) -> None:
    async with serving(make_live, page, **HOOKS) as live:
        await page.goto(f"{live.url}/ui/#/webhooks")
        await expect(page.get_by_text("No tenant-wide webhook yet.")).to_be_visible()
        await page.get_by_role("button", name="New webhook").click()
        form = page.locator("form.webhook-form")
        # A refused URL: the API's problem is shown next to the form.
        await form.get_by_label("URL").fill("ftp://example.com/x")
        await form.get_by_role("button", name="Create webhook").click()
        await expect(form.locator(".problem")).to_contain_text("webhook URL refused")
        # The browser logs the 422 it was answered; that one is expected.
        assert [e for e in console.errors if "422" not in e] == []
        console.errors.clear()
        await form.get_by_label("URL").fill(receiver.url("/tenant"))
        for state in ("input required", "failed", "cancelled"):
            await form.get_by_label(state, exact=True).uncheck()
        await form.get_by_label("demo", exact=True).check()
        await form.get_by_role("button", name="Create webhook").click()
        # The secret, once, with a copy button and a warning.
        secret = page.locator(".once-secret input.secret")
        await expect(secret).to_have_value(re.compile(r"^whsec_"))
        await expect(page.locator(".once-secret .warning")).to_contain_text("only this once")
        await expect(page.locator(".once-secret button.copy")).to_be_visible()
        row = page.locator("#webhooks tr[data-webhook]")
        await expect(row).to_have_count(1)
        await expect(row).to_contain_text(receiver.url("/tenant"))
        await expect(row).to_contain_text("agents: demo")
        await expect(row).to_contain_text("enabled")
        await screenshot(page, "console-webhooks-list")
        # Not shown again: the list, reloaded, has no secret.
        shown = await secret.input_value()
        await page.reload()
        await expect(row).to_have_count(1)
        assert shown not in await page.content()

        await row.get_by_role("link").click()
        await expect(page.locator("h1.url")).to_have_text(receiver.url("/tenant"))
        task = await post(live.url, "/v1/tasks", {"agent": "demo", "input": "take 0.3s"})
        delivery = page.locator(f'#deliveries tr[data-delivery]:has(a[href="#/runs/{task["id"]}"])')
        await expect(delivery.locator("li")).to_have_count(1, timeout=15_000)
        await expect(delivery).to_contain_text("completed")
        await expect(delivery).to_contain_text("succeeded")
        await expect(delivery.locator("li")).to_contain_text("200")
        await screenshot(page, "console-webhooks", full_page=False, docs=True)

        await delivery.get_by_role("button", name="Redeliver").click()
        await expect(page.locator("dialog[open]")).to_contain_text("same webhook-id")
        await confirm(page, "Redeliver")
        await expect(delivery.locator("li")).to_have_count(2, timeout=10_000)
        assert len(receiver.at("/tenant")) == 2
        assert len({r.webhook_id for r in receiver.at("/tenant")}) == 1  # the same delivery

        # A new secret, shown once; the old one signs for a while too.
        await page.get_by_role("button", name="Rotate secret").click()
        await confirm(page, "Rotate secret")
        await expect(secret).to_have_value(re.compile(r"^whsec_"))
        assert await secret.input_value() != shown
        await expect(page.locator(".facts")).to_contain_text("old secret signs until")

        # Edit: another state too, saved with PATCH.
        await page.get_by_role("button", name="Edit").click()
        await page.locator("form.webhook-form").get_by_label("failed", exact=True).check()
        await page.get_by_role("button", name="Save").click()
        await expect(page.locator(".facts")).to_contain_text("failed")

        await page.get_by_role("button", name="Disable").click()
        await confirm(page, "Disable")
        await expect(page.locator(".title .enabled")).to_contain_text("disabled")
        await page.get_by_role("button", name="Enable").click()
        await expect(page.locator(".title .enabled")).to_have_text("enabled")

        await page.get_by_role("button", name="Delete").click()
        await expect(page.locator("dialog[open]")).to_contain_text("delivery log")
        await confirm(page, "Delete")
        await expect(page).to_have_url(f"{live.url}/ui/#/webhooks")
        await expect(page.get_by_text("No tenant-wide webhook yet.")).to_be_visible()
        assert console.errors == []


async def test_the_agent_profiles_are_listed_and_link_to_their_runs(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page, workers=False) as live:
        async with httpx.AsyncClient(base_url=live.url) as client:
            agents = (await client.get("/v1/agents")).json()["agents"]
        await page.goto(f"{live.url}/ui/#/agents")
        cards = page.locator("#agents article[data-agent]")
        await expect(cards).to_have_count(len(agents))
        demo = page.locator('article[data-agent="demo"]')
        (profile,) = [a for a in agents if a["name"] == "demo"]
        await expect(demo).to_contain_text(profile["model"])
        await expect(demo.locator(".prompt pre")).to_contain_text(profile["system_prompt"][:40])
        for tool in profile["tools"]:
            await expect(demo.locator(".tags").first).to_contain_text(tool)
        await expect(demo.locator(".approvals")).to_have_text("calls of publish wait for a person")
        await expect(page.locator('article[data-agent="default"] .approvals')).to_have_count(0)
        await screenshot(page, "console-agents")
        await demo.get_by_role("link", name="Runs of demo").click()
        await expect(page).to_have_url(f"{live.url}/ui/#/runs?agent=demo")
        await expect(page.locator('select[name="agent"]')).to_have_value("demo")
        assert console.errors == []


async def test_the_brake_on_a_profile_holds_its_running_and_new_tasks_and_lets_them_go(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page) as live, httpx.AsyncClient(base_url=live.url) as client:
        running = await post(live.url, "/v1/tasks", {"agent": "demo", "input": "take 4s"})
        await page.goto(f"{live.url}/ui/#/agents")
        demo = page.locator('article[data-agent="demo"]')
        await expect(demo.locator(".brake-state")).to_contain_text("no brake")
        await demo.get_by_role("button", name="Pause all").click()
        dialog = page.locator("dialog[open]")
        await expect(dialog).to_contain_text("Every task of demo for this tenant is held")
        await expect(dialog).to_contain_text("New tasks of demo are accepted and wait")
        await dialog.locator("input[name=reason]").fill(f"a tool misbehaves {XSS}")
        await confirm(page, "Pause all")
        await expect(demo.locator(".brake-state")).to_contain_text("a tool misbehaves")
        await expect(demo.locator(".said")).to_have_text("Paused 1 task.")
        brake = [
            a for a in (await client.get("/v1/agents")).json()["agents"] if a["name"] == "demo"
        ]
        assert brake[0]["paused"]["reason"] == f"a tool misbehaves {XSS}"
        held = (await client.get(f"/v1/tasks/{running['id']}")).json()["paused"]
        assert held["scope"] == "agent"
        new = await post(live.url, "/v1/tasks", {"agent": "demo", "input": "take 0.1s"})
        assert new["paused"]["scope"] == "agent"  # accepted, and waits
        await screenshot(page, "console-agents-brake")
        # Each held task's page says it is the brake's.
        await page.goto(f"{live.url}/ui/#/runs/{new['id']}")
        await expect(page.locator("#paused .brake")).to_contain_text("demo profile's brake")
        await page.goto(f"{live.url}/ui/#/agents")
        await demo.get_by_role("button", name="Resume all").click()
        await expect(page.locator("dialog[open]")).to_contain_text("Tasks paused on their own stay")
        await confirm(page, "Resume all")
        await expect(demo.locator(".said")).to_have_text("Resumed 2 tasks.")
        await expect(demo.locator(".brake-state")).to_contain_text("no brake")
        for task in (running, new):
            done = (await client.get(f"/v1/tasks/{task['id']}", params={"wait": 15})).json()
            assert done["state"] == "completed", done
        assert await page.evaluate("window.__xss") is None
        assert await page.locator("main img, main script").count() == 0
        assert console.errors == []


async def test_the_first_key_ends_open_mode_then_keys_are_made_and_revoked(
    make_live: LiveFactory, page: Page, console: Console
) -> None:
    async with serving(make_live, page, workers=False) as live:
        await page.goto(f"{live.url}/ui/#/keys")
        await expect(page.locator(".open-mode")).to_contain_text("ends it for good")
        await page.get_by_label("name of a new key").fill("laptop")
        await page.get_by_role("button", name="Create key").click()
        dialog = page.locator("dialog[open]")
        await expect(dialog).to_contain_text("open development mode ends for good")
        await screenshot(page, "console-keys-first", full_page=False)
        await confirm(page, "Create and end open mode")
        secret = page.locator(".once-secret input.secret")
        await expect(secret).to_have_value(re.compile(r"^tsk_"))
        key = await secret.input_value()
        await expect(page.locator(".once-secret .warning")).to_contain_text("only this once")
        await expect(page.locator(".signin-again")).to_contain_text(
            "Open development mode has ended"
        )
        async with httpx.AsyncClient(base_url=live.url) as client:
            assert (await client.get("/v1/tasks")).status_code == 401  # open mode is over

        await page.locator(".signin-again").get_by_label("API key").fill(key)
        await (
            page.locator(".signin-again").get_by_role("button", name="Sign in", exact=True).click()
        )
        row = page.locator("#keys tr[data-key]")
        await expect(row).to_have_count(1)
        await expect(row).to_contain_text("laptop")
        await expect(row).to_contain_text("signed in with it")
        await expect(row.locator(".prefix")).to_have_text(key[:10] + "…")
        await expect(page.get_by_role("button", name="Sign out")).to_be_visible()
        assert key not in await page.content()  # never listed
        await expect(page.locator(".open-mode")).to_have_count(0)

        # A second key: no confirmation needed now.
        await page.get_by_label("name of a new key").fill("ci")
        await page.get_by_role("button", name="Create key").click()
        await expect(secret).not_to_have_value(key)
        second = await secret.input_value()
        await expect(row).to_have_count(2)
        await screenshot(page, "console-keys")
        ci = page.locator("#keys tr[data-key]", has_text="ci")
        async with httpx.AsyncClient(base_url=live.url) as client:
            bearer = {"Authorization": f"Bearer {second}"}
            assert (await client.get("/v1/tasks", headers=bearer)).status_code == 200
            await ci.get_by_role("button", name="Revoke").click()
            await expect(page.locator("dialog[open]")).to_contain_text("stops working at once")
            await confirm(page, "Revoke")
            await expect(ci.locator(".revoked-at")).to_contain_text("ago")
            await expect(ci.get_by_role("button", name="Revoke")).to_have_count(0)
            assert (await client.get("/v1/tasks", headers=bearer)).status_code == 401
        assert console.errors == []


async def test_nothing_a_webhook_or_key_carries_runs_as_script(
    make_live: LiveFactory, page: Page, console: Console, receiver: Receiver
) -> None:
    async with serving(make_live, page, workers=False, auth_mode="open", **HOOKS) as live:
        hook = await post(
            live.url,
            "/v1/webhooks",
            {
                "url": receiver.url("/x") + "?q=" + XSS,
                "filters": {"agents": [XSS], "context_id": XSS, "metadata": {"note": XSS}},
            },
        )
        await post(live.url, "/v1/keys", {"name": XSS})
        for path in ("webhooks", f"webhooks/{hook['id']}", "keys"):
            await page.goto(f"{live.url}/ui/#/{path}")
            await expect(page.locator("main")).to_contain_text("<img src=x", timeout=5_000)
        await page.goto(f"{live.url}/ui/#/webhooks/{hook['id']}")
        await page.get_by_role("button", name="Edit").click()
        await expect(page.locator("form.webhook-form textarea")).to_have_value(re.compile("<img"))
        await asyncio.sleep(0.5)
        assert await page.evaluate("window.__xss") is None
        assert await page.locator("main img, main script").count() == 0
        assert console.errors == []


async def test_at_a_phones_width_nothing_overflows(
    make_live: LiveFactory, page: Page, console: Console, receiver: Receiver
) -> None:
    await page.set_viewport_size({"width": 375, "height": 800})
    async with serving(make_live, page, auth_mode="open", **HOOKS) as live:
        long_url = receiver.url("/" + "a-very-long-path-segment" * 8)
        hook = await post(
            live.url,
            "/v1/webhooks",
            {"url": long_url, "states": ["completed"], "filters": {"agents": ["demo", "x" * 90]}},
        )
        await post(live.url, "/v1/keys", {"name": "a-rather-long-key-name-" * 5})
        await post(live.url, "/v1/tasks", {"agent": "demo", "input": "take 0.1s"})
        await page.goto(f"{live.url}/ui/#/webhooks/{hook['id']}")
        await expect(page.locator("#deliveries li")).to_have_count(1, timeout=15_000)
        async with httpx.AsyncClient(base_url=live.url) as client:  # a brake on, with a long why
            brake = {"reason": "a-tool-misbehaves-" * 8}
            assert (await client.post("/v1/agents/demo/pause", json=brake)).status_code == 200
        for path in ("webhooks", f"webhooks/{hook['id']}", "agents", "keys"):
            await page.goto(f"{live.url}/ui/#/{path}")
            await expect(page.locator("main section")).to_be_visible()
            await asyncio.sleep(0.3)
            if path == "webhooks":
                await page.get_by_role("button", name="New webhook").click()
            if path.startswith("webhooks/"):
                await page.get_by_role("button", name="Edit").click()
            width = await page.evaluate("document.documentElement.scrollWidth")
            wide = await page.evaluate(WIDER_THAN_A_PHONE)
            assert width <= 375, f"#/{path} is {width} px wide: {wide}"
            await screenshot(
                page, f"console-phone-{path.split('/')[0]}{'-one' if '/' in path else ''}"
            )
        assert console.errors == []
