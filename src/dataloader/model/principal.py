"""Who is acting, and what each role may do: one definition for every face.

A `Principal` is whoever a request, a CLI command or a Python call acts for: a person signed in to
the console, an API token, the single-user `DL_API_TOKEN` (an admin), the CLI's OS user, or the
library's caller. Faces find the principal their own way (a session cookie, a bearer token, the OS
user) and then ask the same question, `allows(principal, action)`, so the console hides exactly
what the API refuses with 403.

The principal in force is a context variable (`acting_as`): the audit trail reads it in the
transaction that makes the change, so no manager signature has to carry it. Outside any face the
principal is `LIBRARY` (the Python caller that built the `App`)."""

from __future__ import annotations

import contextlib
import contextvars
import enum
from collections.abc import Iterator
from dataclasses import dataclass, field


class Role(enum.StrEnum):
    """Ordered: each role may do everything the one before it may."""

    VIEWER = "viewer"  # reads everything it is shown; changes nothing
    OPERATOR = "operator"  # + retry, cancel, pause/resume, restart, signal, bulk operations
    ADMIN = "admin"  # + limits, deletes, schedules, users, tokens, keys


class Scope(enum.StrEnum):
    """What a machine token may do: `enqueue` only triggers; the others are the roles' sets."""

    ENQUEUE = "enqueue"
    READ = "read"
    OPERATE = "operate"
    ADMIN = "admin"


class Action(enum.StrEnum):
    """The kinds of thing a face can be asked to do. Each route, command and console button names
    one; `REQUIRED` says which role it needs."""

    READ = "read"  # any GET: jobs, queues, stats, processes, workflows, audit for admins only below
    ENQUEUE = "enqueue"  # trigger a job, start a process or a workflow, send a signal
    OPERATE = "operate"  # retry, cancel, pause, resume, restart, set priority, bulk operations
    CONFIGURE = "configure"  # limits, schedules, retention settings, observers
    DELETE = "delete"  # delete jobs, processes, runs; purge
    MANAGE_ACCESS = "manage_access"  # users, tokens, roles, encryption keys
    READ_AUDIT = "read_audit"  # the audit trail
    READ_PAYLOAD = "read_payload"  # see args, results, events unmasked


_ROLE_ACTIONS: dict[Role, frozenset[Action]] = {
    Role.VIEWER: frozenset({Action.READ}),
    Role.OPERATOR: frozenset({Action.READ, Action.ENQUEUE, Action.OPERATE, Action.READ_PAYLOAD}),
    Role.ADMIN: frozenset(Action),
}

_SCOPE_ACTIONS: dict[Scope, frozenset[Action]] = {
    Scope.ENQUEUE: frozenset({Action.ENQUEUE}),
    Scope.READ: _ROLE_ACTIONS[Role.VIEWER],
    Scope.OPERATE: _ROLE_ACTIONS[Role.OPERATOR],
    Scope.ADMIN: _ROLE_ACTIONS[Role.ADMIN],
}


class PrincipalKind(enum.StrEnum):
    USER = "user"  # a person: local password or single sign-on
    TOKEN = "token"  # a scoped API token
    ADMIN_TOKEN = "admin_token"  # DL_API_TOKEN, the single-user set-up
    CLI = "cli"  # the CLI, as the OS user that runs it (it holds the database's credentials)
    LIBRARY = "library"  # Python code using `App` directly
    SYSTEM = "system"  # the node's own duties (reaper, pruner, schedules)
    ANONYMOUS = "anonymous"  # no authentication configured: open, as the API has always been


@dataclass(frozen=True, slots=True)
class Principal:
    kind: PrincipalKind
    name: str
    actions: frozenset[Action] = field(default_factory=frozenset)
    address: str | None = None  # where the request came from, when a face knows it

    @classmethod
    def with_role(cls, kind: PrincipalKind, name: str, role: Role, address: str | None = None) -> Principal:
        return cls(kind, name, _ROLE_ACTIONS[role], address)

    @classmethod
    def with_scopes(cls, name: str, scopes: frozenset[Scope], address: str | None = None) -> Principal:
        actions: frozenset[Action] = frozenset().union(*(_SCOPE_ACTIONS[s] for s in scopes))
        return cls(PrincipalKind.TOKEN, name, actions, address)

    @property
    def label(self) -> str:
        """How the audit trail and the logs name it: `user:alice`, `token:ci-deploy`, `cli:root`."""
        return f"{self.kind.value}:{self.name}"


def allows(principal: Principal, action: Action) -> bool:
    return action in principal.actions


def role_actions(role: Role) -> frozenset[Action]:
    return _ROLE_ACTIONS[role]


def scope_actions(scope: Scope) -> frozenset[Action]:
    return _SCOPE_ACTIONS[scope]


LIBRARY = Principal(PrincipalKind.LIBRARY, "python", _ROLE_ACTIONS[Role.ADMIN])
SYSTEM = Principal(PrincipalKind.SYSTEM, "node", _ROLE_ACTIONS[Role.ADMIN])

_current: contextvars.ContextVar[Principal] = contextvars.ContextVar("dl_principal", default=LIBRARY)


def current_principal() -> Principal:
    return _current.get()


@contextlib.contextmanager
def acting_as(principal: Principal) -> Iterator[Principal]:
    """Everything inside (and every task it starts, which copies the context) acts for `principal`."""
    token = _current.set(principal)
    try:
        yield principal
    finally:
        _current.reset(token)
