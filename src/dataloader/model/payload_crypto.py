"""Payloads encrypted at rest: the operator's keys, the stored envelope, and the mask a principal
that may not read payloads sees. One definition for every writer, every reader and every face.

An encrypted value keeps its column's type (promise 7: `args` stays jsonb): it is a JSON object

    {"$dl_enc": 1, "kid": "k2", "ct": "<base64 of nonce + AES-GCM ciphertext>", ...clear fields}

whose clear fields are copies of the top-level args fields the operator declared searchable
(DL_ENCRYPTION_CLEAR_FIELDS), so the args search (jsonb `@>`, jsonpath) still finds them.

AES-256-GCM (the `cryptography` package) rather than Fernet: a GCM envelope is 28 bytes over the
plaintext instead of Fernet's ~57 plus a third for its base64 of everything, it runs on AES-NI in
one pass (Fernet is CBC + HMAC), and we name keys ourselves (`kid`) so rotation knows which
envelopes are still under an old key without trying every key, which MultiFernet cannot tell. The
key id is the associated data: an envelope cannot be relabelled to another key.

The ring in force is per process (`install`): the jsonb codec of every connection the node opens
decodes envelopes as it reads them (storage/db.py), so no reader has to know about encryption, and
nothing changes on any path while no ring is installed (the default). A stored envelope that no key
here can open decodes to `Sealed` (a dict naming its key and the problem), never an exception, so
one such row cannot break a listing, readiness or the claim loop; the worker fails that job with
the message (promise 9).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from dataloader import metrics
from dataloader.exceptions import ConfigError, EncryptionKeyMissing
from dataloader.model.principal import Action, allows, current_principal

ENVELOPE_KEY = "$dl_enc"
ENVELOPE_VERSION = 1
MASK = "•••"
# The value a masked payload shows in every face: the mark, and why (one string: any JSON field holds it).
MASKED = f"{MASK} hidden: your role may not read payloads"
T = TypeVar("T")
_NONCE_BYTES = 12
_KID = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
_KEYS_VAR = "DL_ENCRYPTION_KEYS"
_URLSAFE = str.maketrans("-_", "+/")
_FIELDS_VAR = "DL_ENCRYPTION_CLEAR_FIELDS"


class Sealed(dict):  # type: ignore[type-arg]
    """A stored envelope this process cannot open (its key is not in DL_ENCRYPTION_KEYS, or it was
    tampered with): the envelope's kid and the problem, in place of the value. A dict, so every
    face can still show the row; the worker refuses to run a job whose args are one."""

    @property
    def problem(self) -> str:
        return str(self.get("problem", "encrypted payload cannot be decrypted"))

    @property
    def kid(self) -> str:
        return str(self.get("kid", ""))


def is_envelope(value: Any) -> bool:
    """An object with the envelope's three keys: args that merely hold a `$dl_enc` field are args."""
    return type(value) is dict and ENVELOPE_KEY in value and "kid" in value and "ct" in value


@dataclass(frozen=True, slots=True)
class ClearFields:
    """The args fields kept in clear beside an envelope: `everywhere` for every task, `by_task`
    for one task. Parsed from DL_ENCRYPTION_CLEAR_FIELDS: `tenant,send_email:customer_id` (a
    field alone: every task; `task:field`: that task's)."""

    everywhere: frozenset[str] = frozenset()
    by_task: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> ClearFields:
        everywhere: set[str] = set()
        by_task: dict[str, set[str]] = {}
        for item in (text or "").split(","):
            item = item.strip()
            if not item:
                continue
            task, sep, name = item.rpartition(":")
            if not name or (sep and not task) or name == ENVELOPE_KEY or name in ("kid", "ct"):
                raise ConfigError(_FIELDS_VAR, f"{item!r} is not a field or task:field (and kid, ct and "
                                               f"{ENVELOPE_KEY} are the envelope's own)")
            (by_task.setdefault(task, set()) if sep else everywhere).add(name)
        return cls(frozenset(everywhere), {t: frozenset(f) for t, f in by_task.items()})

    def for_task(self, task: str | None) -> frozenset[str]:
        if task is None or task not in self.by_task:
            return self.everywhere
        return self.everywhere | self.by_task[task]

    def describe(self) -> dict[str, list[str]]:
        return {"*": sorted(self.everywhere), **{t: sorted(f) for t, f in sorted(self.by_task.items())}}


def _fingerprint(key: bytes) -> str:
    """What status shows of a key: enough to tell two apart, nothing to recover it."""
    return hashlib.sha256(b"dataloader key fingerprint\x00" + key).hexdigest()[:12]


class KeyRing:
    """The operator's keys in order: the first encrypts, every one decrypts. `clear`: the fields
    kept in clear beside an envelope of args."""

    def __init__(self, keys: Sequence[tuple[str, bytes]], clear: ClearFields | None = None) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if not keys:
            raise ConfigError(_KEYS_VAR, "names no key")
        seen: set[str] = set()
        for kid, key in keys:
            if not _KID.match(kid):
                raise ConfigError(_KEYS_VAR, f"key id {kid!r} must be 1-32 of A-Z a-z 0-9 _ . -")
            if kid in seen:
                raise ConfigError(_KEYS_VAR, f"key id {kid!r} is named twice")
            if len(key) != 32:
                raise ConfigError(_KEYS_VAR, f"key {kid!r} must be 32 bytes (base64 of 32 random bytes; "
                                             f"`dataloader keys generate` makes one), got {len(key)}")
            seen.add(kid)
        self.kids: tuple[str, ...] = tuple(kid for kid, _ in keys)
        self.current = self.kids[0]
        self._aead = {kid: AESGCM(key) for kid, key in keys}
        self._fingerprints = {kid: _fingerprint(key) for kid, key in keys}
        self._identity = tuple((kid, self._fingerprints[kid]) for kid in self.kids)
        self.clear = clear or ClearFields()

    @classmethod
    def from_text(cls, text: str, clear: ClearFields | None = None) -> KeyRing:
        """`kid:base64key,kid:base64key` (first encrypts), or `@/path/to/file` holding that list
        (commas or one pair per line): keys kept out of the environment of every process."""
        text = text.strip()
        if text.startswith("@"):
            path = Path(text[1:])
            try:
                text = path.read_text()
            except OSError as exc:
                raise ConfigError(_KEYS_VAR, f"cannot read key file {path}: {exc.strerror}") from None
        keys: list[tuple[str, bytes]] = []
        for item in re.split(r"[,\n]", text):
            item = item.strip()
            if not item or item.startswith("#"):
                continue
            kid, sep, encoded = item.partition(":")
            if not sep:
                raise ConfigError(_KEYS_VAR, "each key is kid:base64key (e.g. k1:<44 characters>)")
            try:
                # either alphabet (urlsafe, as `keys generate` prints, or standard), nothing else in it
                key = base64.b64decode(encoded.strip().translate(_URLSAFE).encode("ascii"), validate=True)
            except (binascii.Error, ValueError, UnicodeEncodeError):
                raise ConfigError(_KEYS_VAR, f"key {kid.strip()!r} is not base64") from None
            keys.append((kid.strip(), key))
        return cls(keys, clear)

    @property
    def identity(self) -> tuple[tuple[str, str], ...]:
        """(kid, fingerprint) in order: two rings with the same identity are the same keys."""
        return self._identity

    def fingerprint(self, kid: str) -> str:
        return self._fingerprints[kid]

    # --- writing -----------------------------------------------------------------------------

    def seal(self, value: Any, clear_from: Iterable[str] = ()) -> dict[str, Any]:
        """`value` (any JSON value) as an envelope under the current key, with the named top-level
        fields of a dict value copied in clear beside it."""
        return self._seal_text(json.dumps(value, separators=(",", ":")), value, clear_from)

    def _seal_text(self, text: str, value: Any, clear_from: Iterable[str]) -> dict[str, Any]:
        kid, ct = self._encrypt(text)
        envelope: dict[str, Any] = {ENVELOPE_KEY: ENVELOPE_VERSION, "kid": kid, "ct": ct}
        if clear_from and isinstance(value, dict):
            for name in clear_from:
                if name in value:
                    envelope[name] = value[name]
        return envelope

    def _encrypt(self, text: str) -> tuple[str, str]:
        nonce = os.urandom(_NONCE_BYTES)
        kid = self.current
        ct = self._aead[kid].encrypt(nonce, text.encode("utf-8", "surrogatepass"), _aad(kid))
        return kid, base64.b64encode(nonce + ct).decode("ascii")

    def _envelope_text(self, text: str, clear: str = "") -> str:
        """The envelope's JSON text, written directly (the kid and base64 need no escaping): a
        batch of a thousand jobs pays for the cipher, not for building and encoding dicts."""
        kid, ct = self._encrypt(text)
        return f'{{"{ENVELOPE_KEY}": {ENVELOPE_VERSION}, "kid": "{kid}", "ct": "{ct}"{clear}}}'

    def seal_args(self, task: str | None, text: str) -> str:
        """A job's args JSON text as the JSON text of its envelope, its task's clear fields beside it.
        Empty args stay `{}`: nothing to hide, and the commonest args cost nothing."""
        if text == "{}":
            return text
        value: Any = None
        if ENVELOPE_KEY in text:
            value = json.loads(text)
            if is_envelope(value):  # sealed already (a re-enqueue of stored args)
                return text
        fields = self.clear.for_task(task)
        if not fields:
            return self._envelope_text(text)
        if value is None:
            value = json.loads(text)
        clear = "".join(f", {json.dumps(name)}: {json.dumps(value[name])}" for name in fields
                        if isinstance(value, dict) and name in value)
        return self._envelope_text(text, clear)

    def seal_text(self, text: str | None) -> str | None:
        """Any JSON text (a result, a step's result, an event's payload) as its envelope's; None
        and JSON null stay (nothing stored)."""
        if text is None or text == "null":
            return text
        return self._envelope_text(text)

    def seal_value(self, value: Any) -> Any:
        """A Python value a codec will encode (progress, an event's payload) as its envelope."""
        if value is None or value == {} or is_envelope(value):
            return value
        return self.seal(value)

    # --- reading -----------------------------------------------------------------------------

    def open(self, envelope: Mapping[str, Any]) -> Any:
        """The value inside; EncryptionKeyMissing naming the kid when no key here opens it."""
        kid = str(envelope.get("kid"))
        aead = self._aead.get(kid)
        if aead is None:
            raise EncryptionKeyMissing(
                f"payload encrypted with key {kid!r}, which DL_ENCRYPTION_KEYS does not hold "
                f"(it holds {', '.join(self.kids)}); add that key back to read it", kid)
        try:
            raw = base64.b64decode(str(envelope.get("ct", "")), validate=True)
            plain = aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _aad(kid))
        except Exception:  # InvalidTag, bad base64, a short value: the same answer to the reader
            raise EncryptionKeyMissing(
                f"payload under key {kid!r} does not decrypt with that key (a different key under the "
                f"same id, or the stored value was changed)", kid) from None
        return json.loads(plain)

    def reveal(self, value: Any) -> Any:
        """`value` with its envelope opened (itself, or one level down: a chain stage's input is
        its parent's sealed result inside clear args); `Sealed` for one that cannot be."""
        if type(value) is not dict:
            return value
        if is_envelope(value):
            return self.open_or_sealed(value)
        for name, inner in value.items():
            if is_envelope(inner):
                value[name] = self.open_or_sealed(inner)
        return value

    def open_or_sealed(self, envelope: Mapping[str, Any]) -> Any:
        try:
            return self.open(envelope)
        except EncryptionKeyMissing as exc:
            metrics.PAYLOADS_UNREADABLE.labels(exc.kid[:32]).inc()
            return Sealed({ENVELOPE_KEY: envelope.get(ENVELOPE_KEY), "kid": exc.kid, "problem": str(exc)})

    def decode(self, text: str) -> Any:
        """The jsonb codec's decoder while this ring is installed."""
        value = json.loads(text)
        return self.reveal(value) if ENVELOPE_KEY in text else value

    def needs_rewrite(self, value: Any) -> bool:
        return is_envelope(value) and value.get("kid") != self.current

    def reseal(self, envelope: Mapping[str, Any]) -> dict[str, Any]:
        """The envelope under the current key, its clear fields kept as they were."""
        inner = self.open(envelope)
        clear = [name for name in envelope if name not in (ENVELOPE_KEY, "kid", "ct")]
        sealed = self.seal(inner)
        for name in clear:
            sealed[name] = envelope[name]
        return sealed


def _aad(kid: str) -> bytes:
    return b"dataloader:1:" + kid.encode("ascii")


def ring_from_settings(keys_text: str | None, clear_text: str | None) -> KeyRing | None:
    """The ring DL_ENCRYPTION_KEYS and DL_ENCRYPTION_CLEAR_FIELDS describe; None when no key is set
    (encryption off)."""
    if not keys_text or not keys_text.strip():
        if clear_text and clear_text.strip():
            ClearFields.parse(clear_text)  # still a clear error for a malformed value
        return None
    return KeyRing.from_text(keys_text, ClearFields.parse(clear_text))


def generate_key() -> str:
    """A new key as DL_ENCRYPTION_KEYS takes it (urlsafe base64 of 32 random bytes)."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode("ascii")


# --- the ring in force in this process -----------------------------------------------------------

_lock = threading.Lock()
_ring: KeyRing | None = None
_users = 0


def active() -> KeyRing | None:
    """The ring this process encrypts and decrypts with; None: encryption is off."""
    return _ring


def install(ring: KeyRing) -> None:
    """Put `ring` in force for the process (an App opening with keys). Two Apps open at once must
    name the same keys: the codec of a shared connection cannot tell whose row it reads."""
    global _ring, _users
    with _lock:
        if _ring is not None and _ring.identity != ring.identity:
            raise ConfigError(_KEYS_VAR, "another App in this process is open with other keys; every App of one "
                                         "process uses the same DL_ENCRYPTION_KEYS")
        if _ring is None or _ring.clear != ring.clear:
            _ring = ring
        _users += 1


def uninstall() -> None:
    """The App that installed a ring closed; the last one out turns encryption off again."""
    global _ring, _users
    with _lock:
        _users = max(0, _users - 1)
        if _users == 0:
            _ring = None


# --- sealing where the writers are (each a no-op while off) -------------------------------------

def seal_args(task: str | None, text: str) -> str:
    ring = _ring
    return text if ring is None else ring.seal_args(task, text)


def seal_text(text: str | None) -> str | None:
    ring = _ring
    return text if ring is None else ring.seal_text(text)


def seal_value(value: Any) -> Any:
    ring = _ring
    return value if ring is None else ring.seal_value(value)


def reveal(value: Any) -> Any:
    """A value read where the codec did not see it (JSON text, nested in an aggregate)."""
    ring = _ring
    if ring is None:
        return value
    return ring.reveal(value)


def reveal_text(text: str | None) -> Any:
    """JSON text (a `::text` column) decoded, its envelope opened."""
    if text is None:
        return None
    ring = _ring
    return json.loads(text) if ring is None else ring.decode(text)


# --- masking: one rule for every face -----------------------------------------------------------

def may_read_payloads() -> bool:
    """Whether the principal in force (model/principal.py) may see payloads unmasked."""
    return allows(current_principal(), Action.READ_PAYLOAD)


def mask(value: Any) -> Any:
    """What a principal without READ_PAYLOAD sees of a payload: the mark and why, nothing of the
    value (None and the empty object stay: they say nothing)."""
    if value is None or value == {} or value == []:
        return value
    return MASKED


def shown(obj: T, *fields: str) -> T:
    """`obj` (a frozen dataclass: a Job, an Event, a step) as the principal in force may see it:
    itself, or a copy with its payload `fields` masked. The models name their payload fields
    (`Job.shown`, `Process.shown`, `WorkflowRun.shown`); the managers every face reads through
    call those, so the HTTP API, the CLI, the console and Python show one thing."""
    if may_read_payloads():
        return obj
    return dataclasses.replace(obj, **{name: mask(getattr(obj, name)) for name in fields})  # type: ignore[type-var]
