"""Password hashing with argon2id (argon2-cffi): memory-hard, salted per hash, its parameters
inside the stored PHC string, so a hash made with older (weaker) settings still verifies and is
re-made at its next sign-in.

A hash costs tens of milliseconds of CPU and 64 MiB by default: it runs in a worker thread, never on
the event loop. An unknown user's sign-in checks the password against a fixed dummy hash, so the
time to answer does not tell which names exist."""

from __future__ import annotations

import asyncio
from functools import cached_property

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError


class Passwords:
    def __init__(self, *, time_cost: int, memory_kib: int) -> None:
        self.hasher = PasswordHasher(time_cost=time_cost, memory_cost=memory_kib)

    async def hash(self, password: str) -> str:
        return await asyncio.to_thread(self.hasher.hash, password)

    @cached_property
    def _dummy(self) -> str:
        return self.hasher.hash("a password nobody has: equalizes an unknown user's answer time")

    async def verify(self, stored: str | None, password: str) -> tuple[bool, str | None]:
        """(matches, a new hash to store when the stored one is weaker than this node's settings).
        `stored` None: an unknown user, checked against the dummy, never a match."""
        return await asyncio.to_thread(self._verify, stored, password)

    def _verify(self, stored: str | None, password: str) -> tuple[bool, str | None]:
        try:
            self.hasher.verify(stored if stored is not None else self._dummy, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return False, None
        if stored is None:
            return False, None
        return True, self.hasher.hash(password) if self.hasher.check_needs_rehash(stored) else None
