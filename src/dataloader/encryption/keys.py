"""`KeyManager` (`app.keys`): which keys this node holds, how many stored payloads each key still
seals, and the rotation that rewrites every envelope under the current key.

Rotation without downtime is three steps (docs/security.md): put the new key first in
DL_ENCRYPTION_KEYS on every node (they encrypt with it and still decrypt with the old one), run
`rotate()` (any node, any face), and once `status()` shows nothing under the old key, remove it.

`rotate()` is a batched command rather than a tracked bulk operation (operations/): an operation is
a filter over jobs worked by the runner of whichever node leases it, while a rotation walks ten
payload columns of seven tables and needs the keys, which live in the process that has them. Each
batch is its own short statement (a primary-key range, then a compare-and-set rewrite of the stale
envelopes in it), so nothing is locked for long and a write racing the batch keeps its newer value;
a rotation stopped anywhere is resumed by running it again: what it rewrote is current and skipped.
Progress: `on_batch` per batch, a log line per column, and `status()` at any time.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dataloader import metrics
from dataloader.exceptions import EncryptionKeyMissing, EncryptionOff, Forbidden, ValidationFailed
from dataloader.model import payload_crypto
from dataloader.model.principal import Action, allows, current_principal
from dataloader.storage import audit_repository
from dataloader.storage.encryption_repository import PAYLOADS, EncryptionRepository

log = logging.getLogger("dataloader.encryption")

DEFAULT_BATCH_SIZE = 500
MAX_BATCH_SIZE = 10_000
_OFF = "encryption at rest is off on this node: set DL_ENCRYPTION_KEYS (docs/security.md)"


@dataclass(frozen=True, slots=True)
class KeyInfo:
    kid: str
    fingerprint: str | None  # None: a key that seals stored payloads but that this node lacks
    current: bool
    envelopes: int

    def to_dict(self) -> dict[str, Any]:
        return {"kid": self.kid, "fingerprint": self.fingerprint, "current": self.current,
                "held": self.fingerprint is not None, "envelopes": self.envelopes}


@dataclass(frozen=True, slots=True)
class KeyStatus:
    """`enabled` false: no DL_ENCRYPTION_KEYS here (nothing else is filled). `keys`: the node's keys
    in order, then any kid found in storage that it lacks; `by_payload`: envelopes per stored column
    and kid; `stale`: envelopes under any key but the current one (0: old keys may be removed)."""

    enabled: bool
    current: str | None = None
    keys: list[KeyInfo] = field(default_factory=list)
    by_payload: dict[str, dict[str, int]] = field(default_factory=dict)
    clear_fields: dict[str, list[str]] = field(default_factory=dict)

    @property
    def stale(self) -> int:
        return sum(k.envelopes for k in self.keys if not k.current)

    def to_dict(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "current": self.current, "keys": [k.to_dict() for k in self.keys],
                "by_payload": self.by_payload, "stale": self.stale, "clear_fields": self.clear_fields}


@dataclass(slots=True)
class RotationReport:
    """What a rotation did: rows examined and envelopes rewritten per column, and the envelopes it
    could not open (by kid: add that key back, then rotate again)."""

    current: str
    examined: int = 0
    rewritten: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, int] = field(default_factory=dict)

    @property
    def total_rewritten(self) -> int:
        return sum(self.rewritten.values())

    def to_dict(self) -> dict[str, Any]:
        return {"current": self.current, "examined": self.examined, "rewritten": self.rewritten,
                "total_rewritten": self.total_rewritten, "unreadable": self.unreadable}


def check_batch_size(value: Any) -> int:
    """The batch size as every face takes it: a whole number 1..MAX_BATCH_SIZE."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BATCH_SIZE:
        problem = f"must be a whole number between 1 and {MAX_BATCH_SIZE}"
        raise ValidationFailed(f"batch_size: {problem}", [{"loc": ["batch_size"], "msg": problem,
                                                            "type": "int_range"}])
    return value


def _may_manage_keys() -> None:
    """Keys are the access model's (Action.MANAGE_ACCESS): refused here, so every face refuses alike."""
    principal = current_principal()
    if not allows(principal, Action.MANAGE_ACCESS):
        raise Forbidden(f"{principal.label} may not manage encryption keys (needs {Action.MANAGE_ACCESS.value})")


class KeyManager:
    """Over every shard's database (DL_SHARDS_JSON): a status sums them, a rotation walks each."""

    def __init__(self, repos: list[EncryptionRepository]) -> None:
        self.repos = repos

    async def status(self) -> KeyStatus:
        _may_manage_keys()
        ring = payload_crypto.active()
        if ring is None:
            return KeyStatus(enabled=False)
        by_payload: dict[str, dict[str, int]] = {}
        per_kid: Counter[str] = Counter()
        for repo in self.repos:
            for row in await repo.envelopes_by_key():
                kid, n = row["kid"] or "?", int(row["n"])
                counts = by_payload.setdefault(row["payload"], {})
                counts[kid] = counts.get(kid, 0) + n
                per_kid[kid] += n
        keys = [KeyInfo(kid, ring.fingerprint(kid), kid == ring.current, per_kid.get(kid, 0)) for kid in ring.kids]
        keys += [KeyInfo(kid, None, False, n) for kid, n in sorted(per_kid.items()) if kid not in ring.kids]
        return KeyStatus(True, ring.current, keys, by_payload, ring.clear.describe())

    async def rotate(self, *, batch_size: int = DEFAULT_BATCH_SIZE,
                     on_batch: Callable[[str, int, int], None] | None = None) -> RotationReport:
        """Rewrite every stored envelope under a key other than the current one (the first of
        DL_ENCRYPTION_KEYS), `batch_size` rows at a time. `on_batch(payload, examined, rewritten)`
        after each batch. EncryptionOff without keys."""
        _may_manage_keys()
        batch_size = check_batch_size(batch_size)
        ring = payload_crypto.active()
        if ring is None:
            raise EncryptionOff(_OFF)
        report = RotationReport(ring.current)
        unreadable: Counter[str] = Counter()
        for repo, payload in ((r, p) for r in self.repos for p in PAYLOADS):
            after, done = payload.start, 0
            while True:
                rows = await repo.scan(payload, after, ring.current, batch_size)
                if not rows:
                    break
                after = rows[-1]["k"]
                keys, old, new = [], [], []
                for row in rows:
                    if row["v"] is None:
                        continue
                    envelope = json.loads(row["v"])
                    if not payload_crypto.is_envelope(envelope):  # args that only hold a `$dl_enc` field
                        continue
                    try:
                        sealed = ring.reseal(envelope)
                    except EncryptionKeyMissing as exc:
                        unreadable[exc.kid] += 1
                        continue
                    keys.append(row["k"])
                    old.append(row["v"])
                    new.append(json.dumps(sealed))
                rewritten = await repo.rewrite(payload, keys, old, new) if keys else 0
                done += rewritten
                report.examined += len(rows)
                if on_batch is not None:
                    on_batch(payload.name, len(rows), rewritten)
                if len(rows) < batch_size:
                    break
            report.rewritten[payload.name] = report.rewritten.get(payload.name, 0) + done
            if done:
                metrics.PAYLOADS_REENCRYPTED.labels(payload.name).inc(done)
                log.info("payloads re-encrypted", extra={"payload": payload.name, "rewritten": done,
                                                         "kid": ring.current})
        report.unreadable = dict(unreadable)
        await audit_repository.record_after(self.repos[0].pool, "keys.rotate", "key", ring.current, {
            "examined": report.examined, "rewritten": report.rewritten, "unreadable": report.unreadable})
        return report
