"""API tokens: create, get, list, revoke — the rules behind `app.tokens`, `/api/v1/tokens` and
`dataloader tokens` — and `authenticate`, the look-up the HTTP API's guard makes per request.

The look-up is on the trigger path, so it is cached: a token found alive is trusted for at most
LOOKUP_CACHE_SEC (and never past its expires_at, read on the database's clock), in a table of at
most `max_cached` tokens (least recently used out first). A miss is one statement
(queries/tokens/authenticate.sql), which also moves last_used_at at most once a minute. A token
not found is not cached (a guesser pays a look-up each time; the auth throttle bounds how often).
What this node revokes is dropped from its table at once; a revocation made elsewhere (the CLI,
another replica) is seen within LOOKUP_CACHE_SEC. Whether any token exists (which closes an API
without DL_API_TOKEN: api/access.py) is cached the same way."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections import OrderedDict
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from dataloader.config import Settings
from dataloader.exceptions import ApiTokenExists, ApiTokenNotFound, InvalidApiToken, ValidationFailed
from dataloader.model.api_token import (
    LAST_USED_PRECISION_SEC,
    LOOKUP_CACHE_SEC,
    ApiToken,
    CreatedToken,
    TokenSpec,
    new_secret,
    secret_hash,
    token_principal,
)
from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.model.ids import new_id
from dataloader.model.principal import Principal, current_principal
from dataloader.storage.audit_repository import audited
from dataloader.storage.token_repository import ApiTokenRepository

log = logging.getLogger("dataloader.tokens")

MAX_CACHED = 1024


@dataclasses.dataclass(frozen=True, slots=True)
class _Cached:
    until: float  # on the node's monotonic clock
    token_id: uuid.UUID
    principal: Principal  # without an address: each request adds its own


class TokenManager:
    def __init__(self, repo: ApiTokenRepository, *, clock: Clock = SYSTEM_CLOCK, cache_sec: float = LOOKUP_CACHE_SEC,
                 max_cached: int = MAX_CACHED) -> None:
        self.repo = repo
        self.clock = clock
        self.cache_sec = cache_sec
        self.max_cached = max_cached
        self._cache: OrderedDict[bytes, _Cached] = OrderedDict()
        self._any_live: tuple[float, bool] | None = None  # (until, value)

    @staticmethod
    def spec(*, name: Any = None, scopes: Any = None, expires_in: Any = None, **fields: Any) -> TokenSpec:
        """A TokenSpec from keyword fields, or InvalidApiToken. `expires_in`: seconds, a timedelta
        or a duration text ("90d", "12h"); default 90 days."""
        values: dict[str, Any] = {"name": name, "scopes": scopes, **fields}
        if expires_in is not None:
            if "expires_in_sec" in fields:
                raise InvalidApiToken("give expires_in or expires_in_sec, not both")
            try:
                values["expires_in_sec"] = (expires_in.total_seconds() if isinstance(expires_in, timedelta)
                                            else Settings.duration_seconds(expires_in))
            except ValueError as exc:
                raise InvalidApiToken(f"expires_in: {exc}", [{"loc": ["expires_in"], "msg": str(exc),
                                                              "type": "value_error"}]) from None
        if isinstance(values.get("scopes"), str):
            values["scopes"] = [values["scopes"]]
        try:
            return TokenSpec(**values)
        except ValidationError as exc:
            failed = ValidationFailed.from_errors(exc.errors())
            raise InvalidApiToken(str(failed), failed.fields) from None

    async def create(self, spec: TokenSpec | None = None, *, created_by: str | None = None, **fields: Any
                     ) -> CreatedToken:
        """A new token and its secret (shown this once: only its hash is stored). `created_by`
        defaults to the principal in force (`user:alice`, `token:ci-admin`, `cli:root`)."""
        if spec is None:
            spec = self.spec(**fields)
        elif fields:
            raise InvalidApiToken("give a TokenSpec or its fields, not both")
        secret = new_secret()
        by = created_by if created_by is not None else current_principal().label
        details = {"scopes": [s.value for s in spec.scopes], "expires_in_sec": spec.expires_in_sec}
        async with audited(self.repo, "token.create", "token", spec.name, details) as change:  # never the secret
            token = await change.repo.insert(new_id(), spec.name, secret_hash(secret), details["scopes"],
                                             spec.expires_in_sec, by)
            if token is None:
                raise ApiTokenExists(f"a token named {spec.name!r} exists and is not revoked (revoke it first)")
        self._any_live = (self.clock.monotonic() + self.cache_sec, True)
        log.info("api token created", extra={"token": token.name, "token_id": str(token.id),
                                              "scopes": [s.value for s in token.scopes], "by": by})
        return CreatedToken(token, secret)

    async def get(self, ref: uuid.UUID | str) -> ApiToken:
        """A token by its id, or by the name of a token that is not revoked."""
        token_id = _as_id(ref)
        token = await (self.repo.get(token_id) if token_id is not None else self.repo.get_live_by_name(str(ref)))
        if token is None:
            raise ApiTokenNotFound(f"no API token {str(ref)!r}" if token_id is not None
                                   else f"no API token named {str(ref)!r} that is not revoked")
        return token

    async def list(self, *, include_revoked: bool = True) -> list[ApiToken]:
        """Tokens newest first (at most 1000), without their secrets, which are never stored."""
        return await self.repo.list(include_revoked=include_revoked)

    async def revoke(self, ref: uuid.UUID | str) -> ApiToken:
        """Revoke a token (by id, or by name): refused by this node's next request, by every other
        node within LOOKUP_CACHE_SEC. Revoking a revoked token changes nothing."""
        token = await self.get(ref)
        async with audited(self.repo, "token.revoke", "token", token.name, {"token_id": str(token.id)}) as change:
            revoked = await change.repo.revoke(token.id)
            if revoked is None:  # deleted by hand in between
                raise ApiTokenNotFound(f"no API token {str(ref)!r}")
        self._drop(revoked.id)
        self._any_live = None
        log.info("api token revoked", extra={"token": revoked.name, "token_id": str(revoked.id),
                                              "by": current_principal().label})
        return revoked

    # -- the guard's questions -----------------------------------------------------------------

    async def authenticate(self, secret: str, address: str | None = None) -> Principal | None:
        """The principal of a `dlt_` secret, or None: unknown, revoked or expired."""
        key = secret_hash(secret)
        now = self.clock.monotonic()
        cached = self._cache.get(key)
        if cached is not None:
            if cached.until > now:
                self._cache.move_to_end(key)
                return dataclasses.replace(cached.principal, address=address)
            del self._cache[key]
        live = await self.repo.authenticate(key, LAST_USED_PRECISION_SEC)
        if live is None:
            return None
        principal = token_principal(live.name, live.scopes)
        self._cache[key] = _Cached(now + min(self.cache_sec, max(0.0, live.remaining_sec)), live.id, principal)
        while len(self._cache) > self.max_cached:
            self._cache.popitem(last=False)
        return dataclasses.replace(principal, address=address)

    async def any_live(self) -> bool:
        """Whether any token is not revoked (expired ones count), as of at most cache_sec ago."""
        now = self.clock.monotonic()
        if self._any_live is not None and self._any_live[0] > now:
            return self._any_live[1]
        value = await self.repo.any_live()
        self._any_live = (now + self.cache_sec, value)
        return value

    def forget(self) -> None:
        """Drop everything cached: the next request asks the database."""
        self._cache.clear()
        self._any_live = None

    def _drop(self, token_id: uuid.UUID) -> None:
        for key in [k for k, entry in self._cache.items() if entry.token_id == token_id]:
            del self._cache[key]


def _as_id(ref: uuid.UUID | str) -> uuid.UUID | None:
    if isinstance(ref, uuid.UUID):
        return ref
    try:
        return uuid.UUID(ref)
    except (ValueError, TypeError, AttributeError):
        return None
