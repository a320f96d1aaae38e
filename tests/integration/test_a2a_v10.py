"""A2A 1.0 over JSON-RPC on `/a2a`: version negotiation, the 1.0 shapes, history,
streams, errors with typed details, and the agent card's 1.0 form."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.a2a.handler import A2AHandler
from taskservice.db.keys import ApiKeyStore
from tests.conftest import ClientFactory, LiveFactory
from tests.integration.helpers import asks_for_a_colour

V1 = {"A2A-Version": "1.0"}


def message(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "role": "ROLE_USER",
        "messageId": fields.pop("messageId", str(uuid.uuid4())),
        "parts": [{"text": text}],
        **fields,
    }


async def rpc(
    client: httpx.AsyncClient, method: str, params: Any = None, *, headers: Any = V1
) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    response = await client.post("/a2a", json=body, headers=headers)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert answer["id"] == 7
    return answer


def reason(answer: dict[str, Any]) -> str:
    [info, *_] = answer["error"]["data"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert info["domain"] == "a2a-protocol.org"
    return str(info["reason"])


async def stream(client: httpx.AsyncClient, method: str, params: Any) -> list[dict[str, Any]]:
    body = {"jsonrpc": "2.0", "id": 8, "method": method, "params": params}
    answers: list[dict[str, Any]] = []
    async with client.stream("POST", "/a2a", json=body, headers=V1) as response:
        if response.headers["content-type"].startswith("application/json"):
            return [json.loads(await response.aread())]  # refused: no stream
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                answers.append(json.loads(line[len("data: ") :]))
    return answers


async def test_the_header_picks_the_version_and_the_method_must_be_of_it(
    make_client: ClientFactory,
) -> None:
    async with make_client() as client:
        sent = await rpc(
            client,
            "SendMessage",
            {"message": message("hi"), "configuration": {"returnImmediately": True}},
        )
        task = sent["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
        # No header: a method only 1.0 has is served as 1.0, one of 0.3 as 0.3.
        no_header = await rpc(client, "GetTask", {"id": task["id"]}, headers={})
        assert no_header["result"]["status"]["state"] == "TASK_STATE_SUBMITTED"
        legacy = await rpc(client, "tasks/get", {"id": task["id"]}, headers={})
        assert legacy["result"]["status"]["state"] == "submitted"
        # A version that is not the method's is refused, naming the header to send.
        old_method = await rpc(client, "tasks/get", {"id": task["id"]})
        assert old_method["error"]["code"] == -32009
        assert "A2A-Version: 0.3" in old_method["error"]["message"]
        assert reason(old_method) == "VERSION_NOT_SUPPORTED"
        unknown = await rpc(client, "GetTask", {"id": task["id"]}, headers={"A2A-Version": "2.0"})
        assert unknown["error"]["code"] == -32009
        assert "1.0, 0.3" in unknown["error"]["message"]
        # A patch number is ignored; the query parameter works as the header does.
        patch = await rpc(client, "GetTask", {"id": task["id"]}, headers={"A2A-Version": "1.0.3"})
        assert patch["result"]["id"] == task["id"]
        body = {"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": task["id"]}}
        by_query = (await client.post("/a2a?A2A-Version=1.0", json=body)).json()
        assert by_query["result"]["id"] == task["id"]
        old = await rpc(client, "tasks/get", {"id": task["id"]}, headers={"A2A-Version": "0.3"})
        assert old["result"]["status"]["state"] == "submitted"


async def test_send_waits_by_default_and_answers_in_1_0_shapes(
    make_client: ClientFactory,
) -> None:
    async with make_client(workers_enabled=True) as client:
        params = {"message": message("What is A2A?", messageId="m-1"), "metadata": {"k": 1}}
        task = (await rpc(client, "SendMessage", params))["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", task["status"]["timestamp"])
    [artifact] = task["artifacts"]
    [part] = artifact["parts"]
    assert set(part) == {"text"}
    assert "What is A2A?" in part["text"]
    user, agent = task["history"]
    assert user == {
        "messageId": "m-1",
        "role": "ROLE_USER",
        "parts": [{"text": "What is A2A?"}],
        "taskId": task["id"],
        "contextId": task["contextId"],
    }
    assert agent["role"] == "ROLE_AGENT"
    assert agent["parts"] == [part]


async def test_history_length_on_get_and_send(make_client: ClientFactory) -> None:
    async with make_client(workers_enabled=True) as client:
        params = {"message": message("one"), "configuration": {"historyLength": 1}}
        task = (await rpc(client, "SendMessage", params))["result"]["task"]
        assert [m["role"] for m in task["history"]] == ["ROLE_AGENT"]
        got = (await rpc(client, "GetTask", {"id": task["id"], "historyLength": 0}))["result"]
        assert "history" not in got
        got = (await rpc(client, "GetTask", {"id": task["id"]}))["result"]
        assert len(got["history"]) == 2
        negative = await rpc(client, "GetTask", {"id": task["id"], "historyLength": -1})
    assert negative["error"]["code"] == -32602
    [_, bad_request] = negative["error"]["data"]
    assert bad_request["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    assert bad_request["fieldViolations"][0]["field"] == "historyLength"


async def test_a_message_to_a_submitted_task_is_queued_and_shown_in_its_history(
    make_client: ClientFactory,
) -> None:
    async with make_client() as client:  # no workers: the task stays submitted
        params = {"message": message("plan"), "configuration": {"returnImmediately": True}}
        task = (await rpc(client, "SendMessage", params))["result"]["task"]
        more = message("and a budget", taskId=task["id"], messageId="m-2")
        params_tail = {"configuration": {"returnImmediately": True}}
        params = {"message": more, **params_tail}
        queued = (await rpc(client, "SendMessage", params))["result"]["task"]
        retried = (await rpc(client, "SendMessage", params))["result"]["task"]
        changed = {**more, "parts": [{"text": "changed"}]}
        other = await rpc(client, "SendMessage", {"message": changed, **params_tail})
        history = (await rpc(client, "GetTask", {"id": task["id"]}))["result"]["history"]
        rest = (await client.get(f"/v1/tasks/{task['id']}")).json()
    assert queued["id"] == retried["id"] == task["id"]
    assert queued["status"]["state"] == "TASK_STATE_SUBMITTED"
    # The retry added nothing; another message under the same id is one of its own.
    assert other["result"]["task"]["id"] == task["id"]
    assert rest["followups"] == 2
    assert [(m["messageId"], m["parts"][0]["text"]) for m in history][1:] == [
        ("m-2", "and a budget"),
        ("m-2", "changed"),
    ]


async def test_errors_carry_typed_details(make_client: ClientFactory) -> None:
    async with make_client() as client:
        missing = await rpc(client, "GetTask", {"id": str(uuid.uuid4())})
        assert missing["error"]["code"] == -32001
        assert reason(missing) == "TASK_NOT_FOUND"
        no_parts = await rpc(client, "SendMessage", {"message": {**message("x"), "parts": []}})
        assert no_parts["error"]["code"] == -32602
        assert reason(no_parts) == "INVALID_PARAMS"
        two = await rpc(
            client,
            "SendMessage",
            {"message": {**message("x"), "parts": [{"text": "a", "data": 1}]}},
        )
        assert two["error"]["data"][1]["fieldViolations"][0]["field"] == "message.parts.0"
        role = await rpc(client, "SendMessage", {"message": {**message("x"), "role": "user"}})
        assert role["error"]["code"] == -32602
        file = {**message("x"), "parts": [{"url": "https://example.com/a.pdf"}]}
        refused = await rpc(client, "SendMessage", {"message": file})
        assert refused["error"]["code"] == -32005
        assert reason(refused) == "CONTENT_TYPE_NOT_SUPPORTED"
        push = await rpc(client, "CreateTaskPushNotificationConfig", {"taskId": "x", "url": "u"})
        assert push["error"]["code"] == -32001  # no task "x"
        assert (await rpc(client, "Nope", {}))["error"]["code"] == -32601
        # Bad input changes nothing.
        assert (await client.get("/v1/tasks")).json()["tasks"] == []


async def test_cancel_once_then_not_cancelable(make_client: ClientFactory) -> None:
    async with make_client() as client:
        params = {"message": message("x"), "configuration": {"returnImmediately": True}}
        task = (await rpc(client, "SendMessage", params))["result"]["task"]
        cancelled = (await rpc(client, "CancelTask", {"id": task["id"]}))["result"]
        assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
        again = await rpc(client, "CancelTask", {"id": task["id"]})
        assert again["error"]["code"] == -32002
        assert reason(again) == "TASK_NOT_CANCELABLE"
        assert again["error"]["data"][0]["metadata"] == {"taskId": task["id"], "state": "cancelled"}
        late = await rpc(client, "SendMessage", {"message": message("more", taskId=task["id"])})
        assert late["error"]["code"] == -32004  # a finished task takes no more messages


async def test_streams_wrap_each_event_and_subscribe_lasts_through_a_question(
    make_live: LiveFactory,
) -> None:
    async with (
        make_live(models={"asker": asks_for_a_colour()}, workers_enabled=True) as live,
        httpx.AsyncClient(base_url=live.url, timeout=20) as client,
    ):
        params = {"message": message("paint"), "metadata": {"model": "asker"}}
        asked = [a["result"] for a in await stream(client, "SendStreamingMessage", params)]
        task = asked[0]["task"]
        assert asked[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        question = asked[-1]["statusUpdate"]["status"]["message"]
        assert question["role"] == "ROLE_AGENT"
        assert question["parts"] == [{"text": "Which colour?"}]
        assert all("final" not in a.get("statusUpdate", {}) for a in asked)

        subscription = asyncio.create_task(stream(client, "SubscribeToTask", {"id": task["id"]}))
        await asyncio.sleep(0.3)
        assert not subscription.done()  # waiting for input does not end a subscription
        reply = {"message": message("green", taskId=task["id"], contextId=task["contextId"])}
        done = (await rpc(client, "SendMessage", reply))["result"]["task"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        seen = [a["result"] for a in await asyncio.wait_for(subscription, 20)]
        finished = await stream(client, "SubscribeToTask", {"id": task["id"]})
    assert seen[0]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    kinds = [next(iter(event)) for event in seen[1:]]
    assert kinds == ["statusUpdate", "artifactUpdate", "statusUpdate"]
    artifact = seen[2]["artifactUpdate"]
    assert artifact["artifact"]["parts"] == [{"text": "painted green"}]
    assert artifact["lastChunk"] is True
    assert seen[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert {e[k]["taskId"] for e in seen[1:] for k in e} == {task["id"]}
    # A finished task has nothing to subscribe to.
    assert [a["error"]["code"] for a in finished] == [-32004]


async def test_the_card_lists_the_interfaces_and_caches(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    key, _ = await ApiKeyStore(db).create(tenant="carded")
    async with make_client(auth_mode="open") as client:
        response = await client.get("/.well-known/agent-card.json")
        card = response.json()
        assert card["supportedInterfaces"] == [
            {"url": f"http://testserver{path}", "protocolBinding": binding, "protocolVersion": v}
            for path, binding, v in [
                ("/a2a", "JSONRPC", "1.0"),
                ("/a2a/rest", "HTTP+JSON", "1.0"),
                ("/a2a", "JSONRPC", "0.3"),
            ]
        ]
        # Open mode: a key is not required, so none is declared (below: when it is).
        assert not {"securitySchemes", "securityRequirements", "security"} & set(card)
        # Also where a client that takes the JSON-RPC endpoint for the base URL looks.
        below = await client.get("/a2a/.well-known/agent-card.json")
        assert below.json() == card
        assert card["capabilities"] == {
            "streaming": True,
            "pushNotifications": True,
            "extendedAgentCard": True,
        }
        assert response.headers["cache-control"] == "no-cache"  # until a key is required
        assert response.headers["last-modified"].endswith(" GMT")
        tag = response.headers["etag"]
        cached = await client.get("/.well-known/agent-card.json", headers={"If-None-Match": tag})
        assert cached.status_code == 304
        # Behind a proxy: the forwarded scheme, host and prefix.
        forwarded = {
            "X-Forwarded-Proto": "https",
            "X-Forwarded-Host": "agents.example.com",
            "X-Forwarded-Prefix": "/tasks",
        }
        proxied = await client.get("/.well-known/agent-card.json", headers=forwarded)
        assert proxied.json()["url"] == "https://agents.example.com/tasks/a2a"
        assert proxied.headers["etag"] != tag
        as_key = {**V1, "Authorization": f"Bearer {key}"}
        extended = (await rpc(client, "GetExtendedAgentCard", headers=as_key))["result"]
        assert "model:offline" in extended["skills"][0]["tags"]
        assert "model:offline" not in card["skills"][0]["tags"]
        # Open mode serves a caller without a key, who has not authenticated, though.
        anonymous = await rpc(client, "GetExtendedAgentCard")
        assert anonymous["error"]["code"] == -32007
        assert reason(anonymous) == "EXTENDED_AGENT_CARD_NOT_CONFIGURED"
    async with make_client(public_url="https://public.example.com/") as client:
        card = (await client.get("/.well-known/agent-card.json")).json()
    assert card["supportedInterfaces"][0]["url"] == "https://public.example.com/a2a"


async def test_a_strict_card_has_only_the_fields_of_1_0(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    key, _ = await ApiKeyStore(db).create(tenant="strict")  # required: the card says so
    async with make_client() as client:
        both = (await client.get("/.well-known/agent-card.json")).json()
    async with make_client(a2a_card_v03_fields=False) as client:
        strict = (await client.get("/.well-known/agent-card.json")).json()
        # The 0.3 methods still answer; 0.3 clients just cannot find them by the card.
        as_key = {"Authorization": f"Bearer {key}"}
        got = await rpc(client, "tasks/get", {"id": str(uuid.uuid4())}, headers=as_key)
    v03_only = {"url", "preferredTransport", "protocolVersion", "security"}
    assert v03_only | {"supportsAuthenticatedExtendedCard"} <= set(both)
    assert not v03_only & set(strict)
    assert "supportsAuthenticatedExtendedCard" not in strict
    assert strict["securitySchemes"] == {
        "bearer": {
            "httpAuthSecurityScheme": both["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]
        }
    }
    assert strict["supportedInterfaces"] == both["supportedInterfaces"]  # 0.3 listed too
    assert got["error"]["code"] == -32001


CARD = "/.well-known/agent-card.json"
SECURITY = {"securitySchemes", "securityRequirements", "security"}


async def test_the_card_declares_the_key_only_while_one_is_required(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    """Open development mode serves a request without a key: a card that declared
    the bearer scheme there declared what is not enforced (the 0.3 kit's
    authentication tests failed on it). The first key makes it required, and the
    card says so at once, in both versions' fields."""
    async with make_client() as client:
        before = await client.get(CARD)
        await ApiKeyStore(db).create(tenant="first")
        after = await client.get(CARD)
        served = await client.post("/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "x"})
    assert not SECURITY & set(before.json())
    assert before.headers["cache-control"] == "no-cache"  # it changes with the first key
    card = after.json()
    assert card["securitySchemes"] == {
        "bearer": {
            "httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "description": "an API key of the service (`taskservice keys create`)",
            },
            "type": "http",
            "scheme": "bearer",
        }
    }
    assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]
    assert card["security"] == [{"bearer": []}]
    assert after.headers["cache-control"].startswith("public, max-age=")
    assert after.headers["etag"] != before.headers["etag"]
    assert served.status_code == 401  # as declared
    async with make_client(a2a_card_v03_fields=False) as client:
        strict = (await client.get(CARD)).json()
    assert set(strict["securitySchemes"]["bearer"]) == {"httpAuthSecurityScheme"}
    assert "securityRequirements" in strict
    # Open mode turned on explicitly: keys are honoured, not required.
    async with make_client(auth_mode="open") as client:
        assert not SECURITY & set((await client.get(CARD)).json())
    async with make_client(auth_mode="required") as client:
        assert set((await client.get(CARD)).json()) >= SECURITY


async def test_list_tasks_pages_by_status_time_newest_first(make_client: ClientFactory) -> None:
    async with make_client() as client:
        ids = []
        for i in range(5):
            sent = {
                "message": message(f"t{i}", contextId="ctx-a" if i % 2 == 0 else "ctx-b"),
                "configuration": {"returnImmediately": True},
            }
            ids.append((await rpc(client, "SendMessage", sent))["result"]["task"]["id"])
        await asyncio.sleep(0.05)
        # Cancelling the first makes it the task whose status changed last.
        cancelled = (await rpc(client, "CancelTask", {"id": ids[0]}))["result"]

        async def listed(**query: Any) -> dict[str, Any]:
            answer = await rpc(client, "ListTasks", query)
            return answer["result"]  # type: ignore[no-any-return]

        first = await listed(pageSize=2)
        second = await listed(pageSize=2, pageToken=first["nextPageToken"])
        third = await listed(pageSize=2, pageToken=second["nextPageToken"])
        context = await listed(contextId="ctx-a")
        state = await listed(status="TASK_STATE_CANCELED")
        after = await listed(statusTimestampAfter=cancelled["status"]["timestamp"])
        with_history = await listed(pageSize=1, historyLength=1)
        bad = await rpc(
            client,
            "ListTasks",
            {
                "pageSize": 150,
                "historyLength": -5,
                "status": "RUNNING",
                "statusTimestampAfter": "-1",
            },
        )
        token = await rpc(client, "ListTasks", {"pageToken": "not-a-token"})
    assert (first["pageSize"], first["totalSize"]) == (2, 5)
    assert [t["id"] for t in first["tasks"]] == [ids[0], ids[4]]
    assert all("history" not in t and "artifacts" not in t for t in first["tasks"])
    assert [t["id"] for t in second["tasks"]] == [ids[3], ids[2]]
    assert [t["id"] for t in third["tasks"]] == [ids[1]]
    assert (third["nextPageToken"], third["pageSize"]) == ("", 1)
    assert [t["id"] for t in context["tasks"]] == [ids[0], ids[4], ids[2]]
    assert (context["pageSize"], context["totalSize"]) == (3, 3)  # tasks on the page
    assert [t["id"] for t in state["tasks"]] == [ids[0]]
    assert [t["id"] for t in after["tasks"]] == [ids[0]]
    assert [m["parts"] for m in with_history["tasks"][0]["history"]] == [[{"text": "t0"}]]
    fields = {v["field"] for v in bad["error"]["data"][1]["fieldViolations"]}
    assert fields == {"pageSize", "historyLength", "status", "statusTimestampAfter"}
    assert token["error"]["code"] == -32602


async def test_a_message_to_a_task_that_finishes_meanwhile_is_unsupported(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler saw the task live; it finished before the message was queued."""
    async with make_client() as client:
        params = {"message": message("x"), "configuration": {"returnImmediately": True}}
        task = (await rpc(client, "SendMessage", params))["result"]["task"]
        live = await client.app.state.runtime.service.get(tenant="default", task_id=task["id"])
        await rpc(client, "CancelTask", {"id": task["id"]})
        real = A2AHandler.find
        calls = iter([live])

        async def stale_first(self: A2AHandler, task_id: str) -> Any:
            return next(calls, None) or await real(self, task_id)

        monkeypatch.setattr(A2AHandler, "find", stale_first)
        late = await rpc(client, "SendMessage", {"message": message("more", taskId=task["id"])})
    assert late["error"]["code"] == -32004
    assert late["error"]["data"][0]["metadata"]["state"] == "cancelled"


async def test_a_message_referring_to_a_task_continues_it_as_a_fork(
    make_client: ClientFactory,
) -> None:
    """A2A's refinement: a new message with `referenceTaskIds` starts a new task in
    the same context, whose history is the referenced task's, then the message."""
    async with make_client(workers_enabled=True) as client:
        first = (await rpc(client, "SendMessage", {"message": message("What is A2A?")}))["result"][
            "task"
        ]
        assert first["status"]["state"] == "TASK_STATE_COMPLETED"
        more = message(
            "and in one word?",
            messageId="m-more",
            referenceTaskIds=[first["id"]],
            contextId=first["contextId"],
        )
        sent = (await rpc(client, "SendMessage", {"message": more}))["result"]["task"]
        retried = (await rpc(client, "SendMessage", {"message": more}))["result"]["task"]
        rest = (await client.get(f"/v1/tasks/{sent['id']}")).json()

        # Fork it from its start instead, with the message as its prompt.
        again = message("What is MCP?", referenceTaskIds=[first["id"]], metadata={"fork_at": 0})
        restarted = (await rpc(client, "SendMessage", {"message": again}))["result"]["task"]

        two = message("x", referenceTaskIds=[first["id"], sent["id"]])
        several = await rpc(client, "SendMessage", {"message": two})
        inside = message("x", referenceTaskIds=[first["id"]], metadata={"fork_at": 1})
        bad_position = await rpc(client, "SendMessage", {"message": inside})
        other_context = message("x", referenceTaskIds=[first["id"]], contextId="elsewhere")
        elsewhere = await rpc(client, "SendMessage", {"message": other_context})
        unknown = message("x", referenceTaskIds=[str(uuid.uuid4())])
        missing = await rpc(client, "SendMessage", {"message": unknown})
        listed = (await client.get("/v1/tasks", params={"forked_from": first["id"]})).json()

    assert sent["id"] not in (first["id"], None)
    assert retried["id"] == sent["id"]
    assert sent["contextId"] == first["contextId"]
    assert sent["status"]["state"] == "TASK_STATE_COMPLETED"
    assert rest["forked_from"] == {"task_id": first["id"], "at": 2}
    history = sent["history"]
    assert [(m["role"], m.get("messageId")) for m in history][2] == ("ROLE_USER", "m-more")
    # The referenced task's history comes first (an agent message's id names its task).
    assert [(m["role"], m["parts"]) for m in history[:2]] == [
        (m["role"], m["parts"]) for m in first["history"]
    ]
    assert history[0]["messageId"] == first["history"][0]["messageId"]
    assert history[2]["parts"] == [{"text": "and in one word?"}]
    assert history[3]["role"] == "ROLE_AGENT"
    assert "and in one word?" in sent["artifacts"][0]["parts"][0]["text"]

    assert restarted["contextId"] == first["contextId"]
    assert "What is MCP?" in restarted["artifacts"][0]["parts"][0]["text"]
    assert restarted["history"][0]["parts"][0]["text"] == "What is MCP?"

    assert several["error"]["code"] == -32602
    assert bad_position["error"]["code"] == -32602
    assert "valid positions" in bad_position["error"]["message"]
    assert elsewhere["error"]["code"] == -32602
    assert missing["error"]["code"] == -32001
    assert len(listed["tasks"]) == 2


async def test_a_tool_call_waiting_for_approval_is_a_data_part_and_answered_with_one(
    make_client: ClientFactory,
) -> None:
    """The demo's `publish` waits for a person: input-required with the call as a
    data part; a message whose data part approves it makes the call."""
    async with make_client(workers_enabled=True) as client:
        params = {"message": message("approve, take 1s"), "metadata": {"agent": "demo"}}
        task = (await rpc(client, "SendMessage", params))["result"]["task"]
        status = task["status"]
        text, data = status["message"]["parts"]
        wrong = message("maybe", taskId=task["id"])
        refused = await rpc(client, "SendMessage", {"message": wrong})
        approve = {
            "role": "ROLE_USER",
            "messageId": str(uuid.uuid4()),
            "taskId": task["id"],
            "parts": [{"data": {"approve": False, "reason": "not today"}}],
        }
        done = (await rpc(client, "SendMessage", {"message": approve}))["result"]["task"]
        calls = (await client.get(f"/v1/tasks/{task['id']}/calls")).json()["calls"]
    assert status["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert text["text"].startswith("approve publish {")
    approval = data["data"]
    assert approval["kind"] == "approval"
    [call] = approval["approvals"]
    assert (call["tool"], call["arguments"]["channel"]) == ("publish", "#demo")
    assert approval["answer"] == {"approve": True}
    assert refused["error"]["code"] == -32602  # text is no decision: it says what is
    assert '{"approve": true|false}' in refused["error"]["message"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "did not approve publishing it: denied" in done["artifacts"][0]["parts"][0]["text"]
    assert "not today" in done["artifacts"][0]["parts"][0]["text"]
    publish = next(c for c in calls if c["name"] == "publish")
    assert (publish["status"], publish["approval"]["via"]) == ("failed", "a2a")
    assert publish["approval"]["by"] == "open"  # who sent the message
