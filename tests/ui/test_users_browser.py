"""Signing in as a user in a real browser against `dataloader serve`: the login page's user form,
the header naming who is signed in with the role, and what the role may not do not on the page
(screenshots: test-artifacts/console/users-*.png)."""

from __future__ import annotations

from dataloader import App, Settings
from tests.ui.browser import browser, serve
from tests.ui.users_support import CHEAP_HASH, PASSWORD, users_db

__all__ = ["users_db"]


async def test_a_user_signs_in_and_sees_their_role(python, subprocess_env, users_db, dsn, tmp_path):
    async with App(Settings(db_dsn=dsn, workers=[], **CHEAP_HASH)) as app:  # type: ignore[arg-type]
        await app.users.create("alice", PASSWORD, "viewer")
    cheap = {f"DL_{k.upper()}": str(v) for k, v in CHEAP_HASH.items()}
    async with serve(python, subprocess_env, tmp_path, token=None, extra_env=cheap) as service, \
            browser("users") as seen:
        page = seen.page
        await page.goto(f"{service.base_url}/ui/")
        assert "/ui/login" in page.url, page.url
        await seen.shot("login")
        await page.fill("#user", "alice")
        await page.fill("#password", PASSWORD)
        await page.click("#sign-in")
        await page.wait_for_url(f"{service.base_url}/ui/")
        assert await page.inner_text("#who") == "alice (viewer)"
        assert await page.locator("a[href='/ui/users']").count() == 0, "a viewer's navigation has no Users"
        await seen.shot("signed-in")
