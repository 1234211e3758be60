"""The console shows only what the role may do, and refuses the rest on the server (issue 40): for
viewer, operator and admin, every action button is on the page exactly when `allows(principal,
action)`, and a forged POST of every console action route (with the browser's right CSRF token) is
403 for a role without its action, before anything is read or written. DL_UI_READ_ONLY makes an
admin a viewer through the same check. Live fragments are rendered per set of actions."""

from __future__ import annotations

import uuid

import pytest
from starlette.routing import Route

from dataloader.model.principal import Action, Role, role_actions
from dataloader.ui.actions import OPEN_POSTS, ROUTE_ACTIONS
from dataloader.ui.console import console_app, live_key
from dataloader.ui.pages import PAGES
from tests.support.engine import enqueue
from tests.ui.conftest import csrf_of
from tests.ui.users_support import add_user, app_of, sign_in, users_console, users_db

__all__ = ["users_db"]

ROLES = [Role.VIEWER, Role.OPERATOR, Role.ADMIN]


def post_routes() -> list[str]:
    return [route.path for page in PAGES for route in page.routes
            if isinstance(route, Route) and "POST" in (route.methods or ())]


def test_every_console_post_route_names_one_action_and_every_named_route_exists():
    posts = post_routes()
    assert len(posts) >= 25, posts
    unnamed = [p for p in posts if p not in ROUTE_ACTIONS and p not in OPEN_POSTS]
    assert not unnamed, f"console POST routes without an Action in ui/actions.py ROUTE_ACTIONS: {unnamed}"
    assert not set(ROUTE_ACTIONS) - set(posts), "ROUTE_ACTIONS names routes that do not exist"


def filled(path: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        for shape in ("{%s}", "{%s:uuid}", "{%s:path}"):
            path = path.replace(shape % name, value)
    assert "{" not in path, path
    return "/ui" + path


@pytest.mark.parametrize("role", ROLES, ids=[r.value for r in ROLES])
async def test_a_forged_post_of_every_action_is_refused_exactly_when_the_role_lacks_it(users_db, dsn, role):
    queue = f"forge-{role.value}-{uuid.uuid4().hex[:6]}"
    job_id = await enqueue(users_db, "dl.noop", queue=queue)
    values = {"job_id": str(job_id), "operation_id": str(uuid.uuid4()), "ns": "ns", "process_id": "p",
              "name": "nobody", "run_id": str(uuid.uuid4()), "token_id": str(uuid.uuid4())}
    async with users_console(dsn) as client:
        await add_user(client, "someone", role)
        csrf = await sign_in(client, "someone")
        for path, action in ROUTE_ACTIONS.items():
            # fields that would do something real for a role that may: refused ones must write none of it
            form = {"csrf": csrf, "queue": queue, "concurrency": "1", "name": "forged", "password": "x" * 20,
                    "role": "admin", "kind": "cancel", "confirm": "yes"}
            answer = await client.post(filled(path, values), data=form)
            allowed = action in role_actions(role)
            assert (answer.status_code == 403) == (not allowed), (role, path, answer.status_code)
            if not allowed:
                assert "may not" in answer.text
        # a bulk delete needs DELETE besides the bulk route's OPERATE
        bulk_delete = await client.post("/ui/bulk", data={"csrf": csrf, "queue": queue, "kind": "delete"})
        assert (bulk_delete.status_code == 403) == (Action.DELETE not in role_actions(role))
    if role is Role.VIEWER:
        assert await users_db.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", job_id) == "queued"
        assert not await users_db.fetchval("SELECT count(*) FROM dl_queue_flow WHERE queue = $1", queue)
    assert not await users_db.fetchval("SELECT count(*) FROM dl_users WHERE name = 'forged'") or role is Role.ADMIN
    if role is Role.OPERATOR:  # may pause (OPERATE), may not set limits (CONFIGURE) nor delete
        flow = await users_db.fetchrow("SELECT paused, concurrency FROM dl_queue_flow WHERE queue = $1", queue)
        assert flow is None or flow["concurrency"] is None
        assert await users_db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = $1", job_id) == 1


# Page -> (button id or text, the action it needs), for the pages of the state set up below.
async def page_buttons(client, db, job_queued, job_finished, schedule: str) -> dict[str, bool]:
    overview = (await client.get("/ui/")).text
    queued = (await client.get(f"/ui/jobs/{job_queued}")).text
    finished = (await client.get(f"/ui/jobs/{job_finished}")).text
    schedules = (await client.get("/ui/schedules")).text
    one = (await client.get(f"/ui/schedules/{schedule}")).text
    users = await client.get("/ui/users")
    return {
        "pause queue": 'id="queue-pause-' in overview,
        "queue limits": 'id="queue-limits-' in overview,
        "cancel job": 'id="cancel-job"' in queued,
        "set priority": 'id="set-priority"' in queued,
        "delete job": 'id="delete-job"' in finished,
        "trigger schedule": 'id="trigger-schedule"' in one and "Trigger now" in schedules,
        "pause schedule": 'id="pause-schedule"' in one,
        "bulk link": "Bulk action on these" in (await client.get(f"/ui/jobs/count?queue={job_queued}")).text
                     or "/ui/bulk?" in (await client.get("/ui/jobs/count")).text,
        "users page": users.status_code == 200 and 'id="add-user"' in users.text,
        "users nav": 'href="/ui/users"' in overview,
    }


NEEDS = {"pause queue": Action.OPERATE, "queue limits": Action.CONFIGURE, "cancel job": Action.OPERATE,
         "set priority": Action.OPERATE, "delete job": Action.DELETE, "trigger schedule": Action.ENQUEUE,
         "pause schedule": Action.CONFIGURE, "bulk link": Action.OPERATE, "users page": Action.MANAGE_ACCESS,
         "users nav": Action.MANAGE_ACCESS}


@pytest.mark.parametrize("role", ROLES, ids=[r.value for r in ROLES])
async def test_each_button_is_shown_exactly_when_the_role_may_use_it(users_db, dsn, role):
    queue = f"show-{role.value}-{uuid.uuid4().hex[:6]}"
    queued = await enqueue(users_db, "dl.noop", queue=queue)
    finished = await enqueue(users_db, "dl.noop", queue=queue)
    async with users_console(dsn) as client:
        app = app_of(client)
        await app.cancel(finished)
        schedule = f"s-{uuid.uuid4().hex[:8]}"
        await app.schedules.create(app.schedules.spec(name=schedule, task="dl.noop", queue=queue, cron="0 3 * * *"))
        await add_user(client, "someone", role)
        await sign_in(client, "someone")
        shown = await page_buttons(client, users_db, queued, finished, schedule)
        await app.schedules.delete(schedule)
    expected = {name: NEEDS[name] in role_actions(role) for name in NEEDS}
    assert shown == expected


async def test_read_only_makes_an_admin_a_viewer(users_db, dsn):
    queue = f"ro-admin-{uuid.uuid4().hex[:6]}"
    await enqueue(users_db, "dl.noop", queue=queue)
    async with users_console(dsn, ui_read_only=True) as client:
        await add_user(client, "boss", Role.ADMIN)
        csrf = await sign_in(client, "boss")
        page = await client.get("/ui/")
        assert 'id="queue-pause-' not in page.text and "boss (viewer)" in page.text and "read-only" in page.text
        refused = await client.post("/ui/queues/pause", data={"queue": queue, "csrf": csrf})
        assert refused.status_code == 403 and "read-only" in refused.text
        assert (await client.get("/ui/users")).status_code == 403
    assert not await users_db.fetchval("SELECT count(*) FROM dl_queue_flow WHERE queue = $1", queue)


async def test_live_fragments_are_rendered_per_role(users_db, dsn):
    """The shared poll renders a topic once per set of actions watching it: a viewer's overview
    fragment has no form, an admin's has them."""
    queue = f"live-{uuid.uuid4().hex[:6]}"
    await enqueue(users_db, "dl.noop", queue=queue)
    async with users_console(dsn) as client:
        app = app_of(client)
        console = console_app(app.settings, lambda: app).state.console  # type: ignore[attr-defined]
        viewer = await console.render_topic(live_key("overview", role_actions(Role.VIEWER)))
        operator = await console.render_topic(live_key("overview", role_actions(Role.OPERATOR)))
        admin = await console.render_topic(live_key("overview", role_actions(Role.ADMIN)))
    assert queue in viewer and "<form" not in viewer
    assert f'id="queue-pause-{queue}"' in operator and "/queues/limits" not in operator
    assert f'id="queue-pause-{queue}"' in admin and "/queues/limits" in admin


async def test_a_refused_page_for_a_viewer_is_the_forbidden_page(users_db, dsn):
    async with users_console(dsn) as client:
        await add_user(client, "reader", Role.VIEWER)
        await sign_in(client, "reader")
        page = await client.get("/ui/users")
        assert page.status_code == 403 and "user:reader may not manage access" in page.text
        assert csrf_of(page.text)
