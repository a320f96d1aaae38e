"""`/v1/keys`: the caller's tenant's own API keys (over `usecases/auth.TenantKeys`).

Every route acts on the caller's tenant only: another tenant's key is 404. The key
itself is in the creation's answer only; the list shows its prefix. In open
development mode the caller is tenant `default`, and its first key ends open mode,
as `taskservice keys create` does.
"""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from taskservice.api.deps import Caller
from taskservice.api.errors import problem_responses
from taskservice.api.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyList, ApiKeyOut

router = APIRouter(prefix="/v1/keys", tags=["keys"])


@router.get(
    "",
    operation_id="listKeys",
    response_model=ApiKeyList,
    responses=problem_responses(401),
    summary="List the tenant's API keys (never the keys themselves), oldest first",
)
async def list_keys(caller: Caller) -> ApiKeyList:
    keys = await caller.keys.of_tenant(caller.tenant)
    return ApiKeyList(
        keys=[ApiKeyOut.of(k, caller.key_id) for k in keys],
        open_mode=await caller.open_mode(),
        first_key_ends_open_mode=caller.keys.first_key_ends_open_mode(),
    )


@router.post(
    "",
    operation_id="createKey",
    status_code=status.HTTP_201_CREATED,
    response_model=ApiKeyCreated,
    responses=problem_responses(401, 422),
    summary="Create an API key for the caller's tenant",
    description="The key is shown in this response only. In open development mode "
    "(no key yet, tenant `default`), the first key ends open mode for good: every "
    "request needs a key from then on.",
)
async def create_key(body: ApiKeyCreate, caller: Caller, response: Response) -> ApiKeyCreated:
    created = await caller.keys.create(caller.tenant, body.name)
    response.headers["Location"] = f"/v1/keys/{created.record.id}"
    out = ApiKeyOut.of(created.record, caller.key_id)
    return ApiKeyCreated(
        **out.model_dump(), key=created.key, ended_open_mode=created.ended_open_mode
    )


@router.get(
    "/{key_id}",
    operation_id="getKey",
    response_model=ApiKeyOut,
    responses=problem_responses(401, 404),
    summary="One of the tenant's API keys (never the key itself)",
)
async def get_key(key_id: str, caller: Caller) -> ApiKeyOut:
    return ApiKeyOut.of(await caller.keys.get(caller.tenant, key_id), caller.key_id)


@router.post(
    "/{key_id}/revoke",
    operation_id="revokeKey",
    response_model=ApiKeyOut,
    responses=problem_responses(401, 404),
    summary="Revoke one of the tenant's API keys (the one in use too: `current` says so)",
    description="The key stops working at once, on every replica. Revoking a revoked "
    "key changes nothing. Revoking the key this request was made with is allowed: "
    "`current` is then true, and the next request needs another key.",
)
async def revoke_key(key_id: str, caller: Caller) -> ApiKeyOut:
    revoked = await caller.keys.revoke(caller.tenant, key_id)
    return ApiKeyOut.of(revoked, caller.key_id)
