"""The audit trail's values: one row of `dl_audit`, the face a change came through, and the one
filter every face searches it with (Python, HTTP, CLI and the console validate the same way).

Who acted is the principal in force (model/principal.py `current_principal`); the face (`python`,
`http`, `cli`, `console`) is a context variable of its own beside it, set where a face knows it
(the CLI, the HTTP app). A principal's kind already says the face for the library and the CLI, so
`current_face` falls back on it; a person or a token may come through HTTP or the console, which
only the adapter can say."""

from __future__ import annotations

import base64
import binascii
import contextlib
import contextvars
import enum
import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import AwareDatetime, Field, ValidationError, field_validator, model_validator

from dataloader.base import StrictModel
from dataloader.exceptions import InvalidCursor, ValidationFailed
from dataloader.model.clock import iso
from dataloader.model.principal import PrincipalKind, current_principal

MAX_AUDIT_LIMIT = 500
# "90m", "12h", "7d" back from now, as a since/until (the settings' duration units)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DEFAULT_AUDIT_LIMIT = 100


class Face(enum.StrEnum):
    PYTHON = "python"
    HTTP = "http"
    CLI = "cli"
    CONSOLE = "console"


class Outcome(enum.StrEnum):
    OK = "ok"
    REFUSED = "refused"  # nothing changed; `error_code` says why


_face: contextvars.ContextVar[Face | None] = contextvars.ContextVar("dl_face", default=None)
_FACE_OF_KIND = {PrincipalKind.LIBRARY: Face.PYTHON, PrincipalKind.CLI: Face.CLI}


def current_face() -> Face | None:
    """The face in force: the one an adapter set (`through`), else the one the principal's kind
    implies (the library: python; the CLI: cli), else unknown (None)."""
    face = _face.get()
    return face if face is not None else _FACE_OF_KIND.get(current_principal().kind)


@contextlib.contextmanager
def through(face: Face) -> Iterator[Face]:
    """Everything inside came through `face` (the HTTP app sets it per request)."""
    token = _face.set(face)
    try:
        yield face
    finally:
        _face.reset(token)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One row of the audit trail (dl_audit, migration 0043)."""

    id: uuid.UUID
    ts: datetime
    actor: str
    actor_kind: str
    address: str | None
    action: str
    target_kind: str | None
    target_id: str | None
    details: dict[str, Any]
    outcome: str
    error_code: str | None
    face: str | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> AuditEntry:
        details = row["details"]
        return cls(id=row["id"], ts=row["ts"], actor=row["actor"], actor_kind=row["actor_kind"],
                   address=row["address"], action=row["action"], target_kind=row["target_kind"],
                   target_id=row["target_id"], details=json.loads(details) if isinstance(details, str) else details,
                   outcome=row["outcome"], error_code=row["error_code"], face=row["face"])

    @property
    def target(self) -> str | None:
        """`job:0193…`, `queue:load`: how the faces show it and how a filter names it."""
        if self.target_kind is None:
            return None
        return self.target_kind if self.target_id is None else f"{self.target_kind}:{self.target_id}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": str(self.id), "ts": iso(self.ts), "actor": self.actor, "actor_kind": self.actor_kind,
                "address": self.address, "action": self.action, "target_kind": self.target_kind,
                "target_id": self.target_id, "target": self.target, "details": self.details,
                "outcome": self.outcome, "error_code": self.error_code, "face": self.face}


@dataclass(frozen=True, slots=True)
class AuditPage:
    entries: list[AuditEntry]
    next_cursor: str | None


def _text(value: str | None) -> str | None:
    if value is not None and (not value.strip() or "\x00" in value):
        raise ValueError("must not be blank or contain NUL characters")
    return value


class AuditFilter(StrictModel):
    """What a search of the trail asks for, newest first. `actor`: a principal's label
    (`user:alice`, `cli:root`) or a kind alone (`user:` or `user`: every user); `action`: a verb
    (`job.cancel`) or a family (`job.` or `job`: every job action); `target`: `kind:id`
    (`job:0193…`, `queue:load`) or a kind alone (`queue`). `since` inclusive, `until` exclusive."""

    actor: str | None = Field(default=None, min_length=1, max_length=400)
    action: str | None = Field(default=None, min_length=1, max_length=100)
    target: str | None = Field(default=None, min_length=1, max_length=600)
    outcome: Outcome | None = None
    since: AwareDatetime | None = None
    until: AwareDatetime | None = None
    limit: int = Field(default=DEFAULT_AUDIT_LIMIT, ge=1, le=MAX_AUDIT_LIMIT, strict=True)
    cursor: str | None = Field(default=None, max_length=200)

    @field_validator("actor", "action", "target", "cursor")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        return _text(value)

    @field_validator("since", "until", mode="before")
    @classmethod
    def _ago(cls, value: Any) -> Any:
        """A time, or text: RFC 3339 with a timezone, or a duration back from now ("90m", "12h", "7d")."""
        text = value.strip().lower() if isinstance(value, str) else ""
        if text[-1:] in _UNITS and text[:-1].replace(".", "", 1).isdigit():
            return datetime.now(UTC) - timedelta(seconds=float(text[:-1]) * _UNITS[text[-1]])
        return value

    @model_validator(mode="after")
    def _ordered(self) -> AuditFilter:
        if self.since is not None and self.until is not None and self.until <= self.since:
            raise ValueError("until must be after since")
        return self

    @classmethod
    def of(cls, value: AuditFilter | Mapping[str, Any] | None = None, **fields: Any) -> AuditFilter:
        """The filter of a mapping (or keywords), or ValidationFailed naming each bad field: the one
        validation of every face."""
        if isinstance(value, AuditFilter) and not fields:
            return value
        data = dict(value.model_dump(exclude_unset=True) if isinstance(value, AuditFilter) else value or {})
        data.update({k: v for k, v in fields.items() if v is not None})
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ValidationFailed.from_errors(exc.errors()) from None

    # -- what the search statement takes ------------------------------------------------------------

    def actor_terms(self) -> tuple[str | None, str | None]:
        """(exact label, kind): one of them, or neither."""
        return _split(self.actor)

    def action_terms(self) -> tuple[str | None, str | None]:
        """(exact action, family prefix with its dot)."""
        if self.action is None:
            return None, None
        if self.action.endswith("."):
            return None, self.action
        if "." not in self.action:
            return None, self.action + "."
        return self.action, None

    def target_terms(self) -> tuple[str | None, str | None]:
        """(kind, id): the id None for a kind alone."""
        if self.target is None:
            return None, None
        kind, sep, ident = self.target.partition(":")
        return kind, (ident if sep and ident else None)

    def before(self) -> tuple[datetime, uuid.UUID] | None:
        return decode_cursor(self.cursor) if self.cursor else None


def _split(value: str | None) -> tuple[str | None, str | None]:
    if value is None:
        return None, None
    kind, sep, name = value.partition(":")
    if sep and name:
        return value, None
    return None, kind


def encode_cursor(ts: datetime, entry_id: uuid.UUID) -> str:
    """An opaque cursor: the (ts, id) of a page's last row."""
    raw = json.dumps([ts.isoformat(), str(entry_id)], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        ts, entry_id = json.loads(raw)
        when = datetime.fromisoformat(ts)
        if when.tzinfo is None:
            raise ValueError("naive time")
        return when, uuid.UUID(entry_id)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError, RecursionError):
        raise InvalidCursor("cursor is not one this API returned; start again without it") from None
