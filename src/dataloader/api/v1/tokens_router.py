"""API v1 tokens for machines (docs/security.md "Tokens and scopes"): create one (its secret is in
this one answer, never again), list them, read one, revoke one. Every route needs `manage_access`
(an admin: DL_API_TOKEN, or a token with scope admin). Errors have the house's one shape; bad
input is a 422 that writes nothing. The rules are `dataloader.tokens.manager.TokenManager`'s, as in
Python and the CLI."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import error_responses
from dataloader.api.v1.models import ErrorCode
from dataloader.api.v1.utils import location
from dataloader.model.api_token import ApiToken, TokenSpec
from dataloader.model.principal import Scope
from dataloader.tokens.manager import TokenManager

router = APIRouter(prefix="/api/v1/tokens", tags=["tokens"], dependencies=[Depends(require_token)])


async def get_token_manager(runtime: Runtime = Depends(get_runtime)) -> TokenManager:
    return runtime.require_app().tokens


Api = Annotated[TokenManager, Depends(get_token_manager)]
Ref = Annotated[str, Path(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                          description="The token's id, or the name of a token that is not revoked")]


class TokenCreateRequest(TokenSpec):
    """The body of `POST /api/v1/tokens`. Unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"name": "ci-deploy", "scopes": ["enqueue"], "expires_in_sec": 2592000},
    ]})


class TokenResponse(BaseModel):
    id: uuid.UUID
    name: str
    scopes: list[Scope]
    state: str = Field(description="active, expired or revoked")
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None = Field(description="When it was last used (exact to about a minute)")
    created_by: str = Field(description="Who created it: `token:<name>`, `admin_token:DL_API_TOKEN`, `cli:<user>`...")


class CreatedTokenResponse(TokenResponse):
    secret: str = Field(description="The token (`dlt_…`): send it as `Authorization: Bearer <secret>`. Shown "
                                    "in this answer only: it is not stored and cannot be shown again")


class TokenListResponse(BaseModel):
    tokens: list[TokenResponse]


def _view(token: ApiToken) -> TokenResponse:
    return TokenResponse(id=token.id, name=token.name, scopes=list(token.scopes), state=token.state(datetime.now(UTC)),
                         created_at=token.created_at, expires_at=token.expires_at, revoked_at=token.revoked_at,
                         last_used_at=token.last_used_at, created_by=token.created_by)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=CreatedTokenResponse,
             summary="Create an API token (its secret is in this answer only)",
             responses=error_responses(ErrorCode.invalid_json, ErrorCode.unsupported_media_type,
                                       ErrorCode.api_token_exists))
async def create_token(body: TokenCreateRequest, response: Response, api: Api) -> CreatedTokenResponse:
    """409 while a token of that name is not revoked. The answer is not cached (`Cache-Control: no-store`)."""
    created = await api.create(TokenSpec.model_validate(body.model_dump()))
    response.headers["Location"] = location("api", "v1", "tokens", str(created.token.id))
    response.headers["Cache-Control"] = "no-store"
    return CreatedTokenResponse(**_view(created.token).model_dump(), secret=created.secret)


@router.get("", response_model=TokenListResponse, summary="List API tokens, newest first (never their secrets)",
            responses=error_responses())
async def list_tokens(
    api: Api,
    include_revoked: Annotated[bool, Query(description="Also revoked tokens")] = True,
) -> TokenListResponse:
    return TokenListResponse(tokens=[_view(t) for t in await api.list(include_revoked=include_revoked)])


@router.get("/{token}", response_model=TokenResponse, summary="One API token",
            responses=error_responses(ErrorCode.api_token_not_found))
async def get_token(token: Ref, api: Api) -> TokenResponse:
    return _view(await api.get(token))


@router.post("/{token}/revoke", response_model=TokenResponse, summary="Revoke an API token",
             responses=error_responses(ErrorCode.api_token_not_found))
async def revoke_token(token: Ref, api: Api) -> TokenResponse:
    """This node refuses it from its next request, every other node within 5 s
    (model.api_token.LOOKUP_CACHE_SEC). Idempotent: a revoked token stays revoked as it was.
    Revoking the last token that is not revoked opens an API without DL_API_TOKEN again."""
    return _view(await api.revoke(token))
