"""API v1 of encryption at rest (docs/security.md "Encryption at rest"): `GET /api/v1/encryption`
(the keys this node holds, and the stored envelopes under each key, per payload column) and
`POST /api/v1/encryption/rotate` (re-encrypt every stored payload under the current key, in
batches; run again to resume). Both need the `manage_access` action (403 `forbidden`); without
DL_ENCRYPTION_KEYS the status says `enabled: false` and a rotation is 409 `encryption_off`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel, ConfigDict, Field

from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import error_responses
from dataloader.api.v1.models import ErrorCode
from dataloader.encryption.keys import DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE

router = APIRouter(prefix="/api/v1", tags=["encryption"], dependencies=[Depends(require_token)])


class KeyResponse(BaseModel):
    kid: str
    fingerprint: str | None = Field(description="A digest that tells keys apart (never the key); null: a key "
                                                "that seals stored payloads but that this node does not hold")
    current: bool = Field(description="The key new payloads are encrypted with (the first of DL_ENCRYPTION_KEYS)")
    held: bool
    envelopes: int = Field(description="Stored payloads encrypted with this key")


class KeyStatusResponse(BaseModel):
    enabled: bool = Field(description="false: DL_ENCRYPTION_KEYS is not set on this node (payloads are stored clear)")
    current: str | None
    keys: list[KeyResponse]
    by_payload: dict[str, dict[str, int]] = Field(description="Envelopes per stored column (table.column) and kid")
    stale: int = Field(description="Envelopes under a key other than the current one (0: old keys may be removed)")
    clear_fields: dict[str, list[str]] = Field(description="Args fields kept in clear beside the envelope, "
                                                           "searchable: '*' for every task, else per task")


class RotateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    batch_size: int = Field(default=DEFAULT_BATCH_SIZE, ge=1, le=MAX_BATCH_SIZE, strict=True,
                            description="Rows examined per statement")


class RotateResponse(BaseModel):
    current: str
    examined: int
    rewritten: dict[str, int] = Field(description="Envelopes re-encrypted per stored column")
    total_rewritten: int
    unreadable: dict[str, int] = Field(description="Envelopes no key here opens, by kid (add the key back)")


@router.get("/encryption", response_model=KeyStatusResponse, summary="Encryption keys and what each still seals",
            responses=error_responses(ErrorCode.forbidden, ErrorCode.query_timeout))
async def key_status(runtime: Annotated[Runtime, Depends(get_runtime)]) -> Any:
    return (await runtime.require_app().keys.status()).to_dict()


@router.post("/encryption/rotate", response_model=RotateResponse,
             summary="Re-encrypt every stored payload under the current key (resumable: run again)",
             responses=error_responses(ErrorCode.forbidden, ErrorCode.encryption_off, ErrorCode.invalid_json,
                                       ErrorCode.unsupported_media_type))
async def rotate(runtime: Annotated[Runtime, Depends(get_runtime)],
                 body: Annotated[RotateRequest | None, Body()] = None) -> Any:
    report = await runtime.require_app().keys.rotate(batch_size=(body or RotateRequest()).batch_size)
    return report.to_dict()
