"""The one table of who may do what (model/principal.py): roles nest, scopes map onto them, and the
principal in force follows the context into tasks and is restored afterwards."""

import asyncio

from dataloader.model.principal import (
    LIBRARY,
    Action,
    Principal,
    PrincipalKind,
    Role,
    Scope,
    acting_as,
    allows,
    current_principal,
    role_actions,
)


def test_roles_nest_and_viewer_changes_nothing():
    assert role_actions(Role.VIEWER) < role_actions(Role.OPERATOR) < role_actions(Role.ADMIN)
    viewer = Principal.with_role(PrincipalKind.USER, "vera", Role.VIEWER)
    assert allows(viewer, Action.READ)
    assert not any(allows(viewer, a) for a in Action if a is not Action.READ)
    operator = Principal.with_role(PrincipalKind.USER, "olga", Role.OPERATOR)
    assert allows(operator, Action.OPERATE) and not allows(operator, Action.DELETE)
    assert not allows(operator, Action.MANAGE_ACCESS)


def test_enqueue_scope_may_only_enqueue():
    ci = Principal.with_scopes("ci", frozenset({Scope.ENQUEUE}))
    assert [a for a in Action if allows(ci, a)] == [Action.ENQUEUE]
    both = Principal.with_scopes("ci", frozenset({Scope.ENQUEUE, Scope.READ}))
    assert {a for a in Action if allows(both, a)} == {Action.ENQUEUE, Action.READ}
    assert ci.label == "token:ci"


async def test_acting_as_follows_tasks_and_is_restored():
    assert current_principal() is LIBRARY
    alice = Principal.with_role(PrincipalKind.USER, "alice", Role.ADMIN, "10.0.0.1")
    with acting_as(alice):
        async def who() -> Principal:
            return current_principal()

        assert await asyncio.create_task(who()) is alice
        assert await asyncio.to_thread(current_principal) is alice
    assert current_principal() is LIBRARY
