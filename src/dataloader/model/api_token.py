"""API tokens for machines: the rules every face shares (a token's name, its scopes, its expiry and
their bounds and defaults), the secret's shape, and the typed row storage returns.

A token is a random secret shown once, at creation, as `dlt_<43 characters>`: the prefix makes a
leaked one easy to recognise (in a log, a repository, a secret scanner) and tells the API's guard
to look it up instead of comparing it with DL_API_TOKEN. Only its SHA-256 is stored.

Why SHA-256 and not argon2: argon2 (or bcrypt, scrypt) is slow on purpose so that a stolen table
of hashes of *human* passwords cannot be searched by guessing likely passwords. A token's secret
is 256 random bits; no guessing gets near it however fast the hash is, so the slowness would buy
nothing and would cost every API request tens of milliseconds of CPU. And a salted slow hash
cannot be looked up: the guard would have to try every token's hash in turn. An unsalted SHA-256
of a high-entropy secret is one primary-key look-up and is as safe (GitHub's and PyPI's tokens are
stored the same way)."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from pydantic import Field, field_validator

from dataloader.base import StrictModel
from dataloader.model.clock import iso_times
from dataloader.model.principal import Principal, Scope

TOKEN_PREFIX = "dlt_"
SECRET_BYTES = 32  # 256 bits; token_urlsafe writes them as 43 characters
NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"

MIN_EXPIRES_IN_SEC = 60.0
MAX_EXPIRES_IN_SEC = 730 * 86400.0  # two years: a token that never ends is a token nobody rotates
DEFAULT_EXPIRES_IN_SEC = 90 * 86400.0

# How long a node trusts what it read about a token (and whether any token exists) before it asks
# the database again: the bound on how late a revocation made elsewhere (the CLI, another replica)
# is seen. A revocation through this node's App is seen by its next request. Expiry is never
# late: a cached entry lives at most until the token's expires_at, on the database's clock.
LOOKUP_CACHE_SEC = 5.0
# last_used_at is written at most once per this many seconds per token (by the look-up that finds
# it older): a token used 1000 times a second costs one UPDATE a minute, not 1000.
LAST_USED_PRECISION_SEC = 60.0


class TokenSpec(StrictModel):
    """What a new token is: the model behind `app.tokens.create`, the HTTP body and the CLI."""

    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN,
                      description="Unique among tokens not revoked: lower-case letters, digits, . _ - "
                                  "(e.g. ci-deploy); how the audit trail names the token")
    scopes: list[Scope] = Field(min_length=1, max_length=len(Scope),
                                description="What the token may do: enqueue (trigger, start, signal only), "
                                            "read, operate (read + enqueue + retry, cancel, pause...), admin")
    expires_in_sec: float = Field(default=DEFAULT_EXPIRES_IN_SEC, ge=MIN_EXPIRES_IN_SEC, le=MAX_EXPIRES_IN_SEC,
                                  allow_inf_nan=False,
                                  description="Seconds from now until the token stops working (60 s to 730 days; "
                                              "default 90 days)")

    @field_validator("name")
    @classmethod
    def _not_an_id(cls, value: str) -> str:
        try:
            uuid.UUID(value)
        except ValueError:
            return value
        raise ValueError("must not be a UUID (a token is named by its name or its id)")

    @field_validator("scopes")
    @classmethod
    def _distinct(cls, value: list[Scope]) -> list[Scope]:
        if len(set(value)) != len(value):
            raise ValueError("each scope once")
        return sorted(value, key=list(Scope).index)


def new_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(SECRET_BYTES)


def secret_hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


def looks_like_token(value: str) -> bool:
    """A bearer value that is one of ours (as opposed to DL_API_TOKEN, or garbage)."""
    return value.startswith(TOKEN_PREFIX)


@dataclass(frozen=True, slots=True)
class ApiToken:
    """A token as stored, without its secret (which is never stored) or its hash."""

    id: uuid.UUID
    name: str
    scopes: tuple[Scope, ...]
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None
    created_by: str

    @classmethod
    def from_row(cls, row: Any) -> ApiToken:
        return cls(id=row["id"], name=row["name"], scopes=tuple(Scope(s) for s in row["scopes"]),
                   created_at=row["created_at"], expires_at=row["expires_at"], revoked_at=row["revoked_at"],
                   last_used_at=row["last_used_at"], created_by=row["created_by"])

    def state(self, now: datetime) -> str:
        """`active`, `expired` or `revoked`, as the console and the CLI show it."""
        if self.revoked_at is not None:
            return "revoked"
        return "active" if self.expires_at > now else "expired"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["scopes"] = [s.value for s in self.scopes]
        return iso_times(data)


@dataclass(frozen=True, slots=True)
class CreatedToken:
    """A new token and its secret: the only time the secret exists outside its holder."""

    token: ApiToken
    secret: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.token.to_dict(), "secret": self.secret}


def token_principal(name: str, scopes: tuple[Scope, ...] | frozenset[Scope], address: str | None = None
                    ) -> Principal:
    return Principal.with_scopes(name, frozenset(scopes), address)
