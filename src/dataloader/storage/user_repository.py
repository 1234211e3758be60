"""SQL of the console's users (`queries/users/*.sql`, table of migration 0041). The rules (name
shape, roles, the password's length and hashing, the last admin) are the users capability's
(users/manager.py) and the statements'; this only runs them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from dataloader.model.principal import Role
from dataloader.model.user import User
from dataloader.storage.queries import sql


@dataclass(frozen=True, slots=True)
class Change:
    """What a guarded change found: `found` the user, `refused` because they are the last enabled
    admin, else `user` as it is now (None after a delete)."""

    found: bool
    refused: bool
    user: User | None = None
    sessions_ended: int = 0


def _user(row: Any) -> User:
    return User(name=row["name"], role=Role(row["role"]), disabled=row["disabled"], created_at=row["created_at"],
                last_login_at=row["last_login_at"])


def _change(row: Any) -> Change:
    user = _user(row) if row["name"] is not None else None
    return Change(found=row["found"], refused=row["refused"], user=user, sessions_ended=row.get("sessions_ended", 0))


class UserRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def insert(self, name: str, password_hash: str, role: Role) -> User | None:
        """The new user, or None when the name is taken."""
        row = await self.pool.fetchrow(sql("users/insert_user"), name, password_hash, role.value)
        return _user(row) if row is not None else None

    async def get(self, name: str) -> User | None:
        row = await self.pool.fetchrow(sql("users/get_user"), name)
        return _user(row) if row is not None else None

    async def list(self) -> list[User]:
        return [_user(row) for row in await self.pool.fetch(sql("users/list_users"))]

    async def password_of(self, name: str) -> tuple[str, bool] | None:
        """(password hash, disabled), or None for no such user."""
        row = await self.pool.fetchrow(sql("users/password_of"), name)
        return (row["password_hash"], row["disabled"]) if row is not None else None

    async def signed_in(self, name: str, rehashed: str | None) -> Role | None:
        """Record a sign-in (and a stronger hash); the role, or None when the user is gone or disabled."""
        value = await self.pool.fetchval(sql("users/signed_in"), name, rehashed)
        return Role(value) if value is not None else None

    async def sso_signed_in(self, name: str, role: Role) -> User | None:
        """The user a single sign-on signs in (made or given the role), or None when disabled."""
        row = await self.pool.fetchrow(sql("users/sso_signed_in"), name, role.value)
        return _user(row) if row is not None else None

    async def set_role(self, name: str, role: Role) -> Change:
        return _change(await self.pool.fetchrow(sql("users/set_role"), name, role.value))

    async def set_disabled(self, name: str, disabled: bool) -> Change:
        return _change(await self.pool.fetchrow(sql("users/set_disabled"), name, disabled))

    async def set_password(self, name: str, password_hash: str) -> Change:
        row = await self.pool.fetchrow(sql("users/set_password"), name, password_hash)
        if row is None:
            return Change(found=False, refused=False)
        return Change(found=True, refused=False, user=_user(row), sessions_ended=row["sessions_ended"])

    async def delete(self, name: str) -> Change:
        row = await self.pool.fetchrow(sql("users/delete_user"), name)
        return Change(found=row["found"], refused=row["refused"])
