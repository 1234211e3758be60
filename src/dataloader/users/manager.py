"""Users: create, list, read, change role or password, disable, enable, delete, and check a
sign-in — the rules behind `app.users`, the HTTP API (`/api/v1/users`), the CLI (`dataloader
users`) and the console's /ui/users page. Input goes through model/user.py's functions first, so
every face refuses the same input with the same words, before anything is written.

The last enabled admin cannot be demoted, disabled or deleted while other users remain
(`LastAdmin`): with users present the console asks everybody to sign in, and without an admin
nobody could manage them there any more (the CLI, which holds the database's credentials, still
could). The only user may be deleted: the console is then as it was before any user existed."""

from __future__ import annotations

from typing import Any

from dataloader.exceptions import LastAdmin, UserExists, UserNotFound
from dataloader.model import user as rules
from dataloader.model.principal import Role
from dataloader.model.user import User
from dataloader.storage.audit_repository import audited
from dataloader.storage.console_session_repository import ConsoleSessionRepository
from dataloader.storage.user_repository import Change, UserRepository
from dataloader.users.passwords import Passwords


class UserManager:
    def __init__(self, repo: UserRepository, passwords: Passwords, sessions: ConsoleSessionRepository) -> None:
        self.repo = repo
        self.passwords = passwords
        # The console's sign-in sessions (ui/auth.py, migrations 0028, 0041): a user's end with
        # their disable, new password or delete, in the same statement.
        self.sessions = sessions

    async def create(self, name: str, password: str, role: Role | str = Role.VIEWER) -> User:
        name, password, given_role = rules.user_name(name), rules.password(password), rules.role(role)
        hashed = await self.passwords.hash(password)  # before the transaction: argon2 takes its time
        async with audited(self.repo, "user.create", "user", name, {"role": given_role.value}) as change:
            created = await change.repo.insert(name, hashed, given_role)
            if created is None:
                raise UserExists(f"a user named {name!r} exists")
        return created

    async def get(self, name: str) -> User:
        found = await self.repo.get(rules.user_name(name))
        if found is None:
            raise UserNotFound(f"no user {name!r}")
        return found

    async def list(self) -> list[User]:
        return await self.repo.list()

    async def set_role(self, name: str, role: Role | str) -> User:
        name, given_role = rules.user_name(name), rules.role(role)
        async with audited(self.repo, "user.set_role", "user", name, {"role": given_role.value}) as change:
            return _changed(name, await change.repo.set_role(name, given_role), "demote")

    async def set_password(self, name: str, password: str) -> User:
        """A new password; every session of the user ends (they sign in again with it)."""
        name, password = rules.user_name(name), rules.password(password)
        hashed = await self.passwords.hash(password)
        async with audited(self.repo, "user.set_password", "user", name) as change:  # never the password
            return _changed(name, await change.repo.set_password(name, hashed), "")

    async def disable(self, name: str) -> User:
        """Refuses sign-in and ends every session of the user at once; the name stays taken."""
        name = rules.user_name(name)
        async with audited(self.repo, "user.disable", "user", name) as change:
            return _changed(name, await change.repo.set_disabled(name, True), "disable")

    async def enable(self, name: str) -> User:
        name = rules.user_name(name)
        async with audited(self.repo, "user.enable", "user", name) as change:
            return _changed(name, await change.repo.set_disabled(name, False), "")

    async def delete(self, name: str) -> None:
        """The user and every session of theirs (the last enabled admin only when nobody else is left)."""
        name = rules.user_name(name)
        async with audited(self.repo, "user.delete", "user", name) as change:
            _changed(name, await change.repo.delete(name), "delete")

    async def authenticate(self, name: str, password: str) -> User | None:
        """The user when `password` is theirs and they are enabled, else None (an unknown name, a
        malformed one, a wrong password and a disabled user answer alike, in about the same time).
        Records the sign-in."""
        try:
            name = rules.user_name(name)
        except ValueError:
            name = ""
        stored = await self.repo.password_of(name) if name else None
        matches, rehashed = await self.passwords.verify(stored[0] if stored else None, password)
        if not matches or stored is None or stored[1]:
            return None
        if await self.repo.signed_in(name, rehashed) is None:  # disabled or deleted meanwhile
            return None
        return await self.repo.get(name)


    async def sso_sign_in(self, name: str, role: Role | str) -> User | None:
        """A person the single sign-on provider vouched for: the user (made on a first sign-in, given
        `role` every time), or None when an admin disabled them."""
        return await self.repo.sso_signed_in(rules.user_name(name), rules.role(role))


def _changed(name: str, change: Change, verb: str) -> Any:
    if not change.found:
        raise UserNotFound(f"no user {name!r}")
    if change.refused:
        raise LastAdmin(f"{name!r} is the last enabled admin: cannot {verb} them; make another user an admin first")
    return change.user
