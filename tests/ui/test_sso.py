"""Single sign-on to the console with OpenID Connect (issue 40, ui/sso.py) against a real provider:
oidc-provider-mock (Authlib's authorization server in Flask) on a thread of this process, with
this console registered as a client (its secret checked at the token exchange), nonces required.
The person authorizes at the provider's form, the provider redirects back with a code, and the
console signs them in as the user their claims name, with the role their groups map to; a stale
state, an unmapped person and a disabled user are refused with nothing signed in."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import httpx
import oidc_provider_mock
import pytest

from dataloader import Settings
from dataloader.exceptions import ConfigError
from dataloader.model.principal import Role
from dataloader.ui import auth
from dataloader.ui.sso import Oidc
from tests.ui.users_support import app_of, users_console, users_db

__all__ = ["users_db"]

CALLBACK = "http://console/ui/login/oidc/callback"
ROLES = {"dl-ops": "operator", "dl-admins": "admin"}


@pytest.fixture(scope="module")
def provider() -> Iterator[dict[str, str]]:
    with oidc_provider_mock.run_server_in_thread(require_client_registration=True, require_nonce=True) as server:
        issuer = f"http://localhost:{server.server_port}"
        client = httpx.post(f"{issuer}/oauth2/clients", json={"redirect_uris": [CALLBACK]}).json()
        yield {"oidc_issuer": issuer, "oidc_client_id": client["client_id"],
               "oidc_client_secret": client["client_secret"], "oidc_roles_json": ROLES}


async def authorize(client: httpx.AsyncClient, issuer: str, sub: str, claims: dict, *, next_path: str = "/ui/"
                    ) -> httpx.Response:
    """The browser's round trip: the console's redirect to the provider, the person's answer at the
    provider's form, the provider's redirect back to the console's callback (the console's answer)."""
    start = await client.get(f"/ui/login/oidc?next={quote(next_path)}")
    assert start.status_code == 303 and start.headers["location"].startswith(f"{issuer}/oauth2/authorize?")
    async with httpx.AsyncClient() as person:
        assert (await person.put(f"{issuer}/users/{quote(sub)}", json=claims)).status_code == 204
        answer = await person.post(start.headers["location"], data={"sub": sub})
    assert answer.status_code == 302 and answer.headers["location"].startswith(CALLBACK + "?"), answer.text[-500:]
    return await client.get(answer.headers["location"])


async def test_a_person_signs_in_through_the_provider_with_the_role_of_their_groups(users_db, dsn, provider):
    issuer = provider["oidc_issuer"]
    async with users_console(dsn, **provider) as client:
        assert (await client.get("/ui/")).status_code == 303, "single sign-on set up: the console is closed"
        assert 'id="login-sso"' in (await client.get("/ui/login")).text
        done = await authorize(client, issuer, "alice-sub", {"email": "Alice@Example.com", "email_verified": True,
                                                            "groups": ["staff", "dl-ops"]}, next_path="/ui/jobs")
        assert done.status_code == 303 and done.headers["location"] == "/ui/jobs", done.text[-500:]
        page = await client.get("/ui/")
        assert page.status_code == 200 and "alice@example.com (operator)" in page.text
        stored = await users_db.fetchrow("SELECT role, password_hash, last_login_at FROM dl_users "
                                         "WHERE name = 'alice@example.com'")
        assert stored["role"] == "operator" and stored["password_hash"] == "!sso" and stored["last_login_at"]
        # no password signs this user in
        assert await app_of(client).users.authenticate("alice@example.com", "!sso") is None

        # the provider's groups are the truth at each sign-in: promoted there, admin here
        again = await authorize(client, issuer, "alice-sub", {"email": "alice@example.com",
                                                             "groups": ["dl-admins", "dl-ops"]})
        assert again.status_code == 303
        assert "alice@example.com (admin)" in (await client.get("/ui/")).text


async def test_refusals_sign_nobody_in(users_db, dsn, provider):
    issuer = provider["oidc_issuer"]
    async with users_console(dsn, **provider) as client:
        nobody = await authorize(client, issuer, "bob-sub", {"email": "bob@example.com", "groups": ["staff"]})
        assert nobody.status_code == 401 and "has no role here" in nobody.text
        assert not await users_db.fetchval("SELECT count(*) FROM dl_users")

        unverified = await authorize(client, issuer, "eve-sub", {"email": "eve@example.com", "email_verified": False,
                                                                 "groups": ["dl-admins"]})
        assert unverified.status_code == 401 and "not verified" in unverified.text

        await app_of(client).users.create("carol@example.com", "long enough pass", "viewer")
        await app_of(client).users.disable("carol@example.com")
        disabled = await authorize(client, issuer, "carol-sub", {"email": "carol@example.com", "groups": ["dl-ops"]})
        assert disabled.status_code == 401 and "is disabled here" in disabled.text
        assert (await app_of(client).users.get("carol@example.com")).role is Role.VIEWER

        # a callback this browser did not start (another's code and state, or a replay) is refused
        start = await client.get("/ui/login/oidc")
        async with httpx.AsyncClient() as person:
            await person.put(f"{issuer}/users/dave-sub", json={"email": "dave@example.com", "groups": ["dl-ops"]})
            answer = await person.post(start.headers["location"], data={"sub": "dave-sub"})
        async with users_console(dsn, **provider) as other_browser:
            stolen = await other_browser.get(answer.headers["location"])
            assert stolen.status_code == 401 and "try again" in stolen.text
            assert auth.SESSION_COOKIE not in other_browser.cookies
        assert auth.SESSION_COOKIE not in client.cookies
        assert not await users_db.fetchval("SELECT count(*) FROM dl_users WHERE name = 'dave@example.com'")


def test_a_half_set_up_provider_is_a_configuration_error():
    with pytest.raises(ConfigError, match="DL_OIDC_CLIENT_ID"):
        Oidc.of(Settings(db_dsn="postgresql://x/y", oidc_issuer="https://id.example.com"))
    with pytest.raises(ConfigError, match="DL_OIDC_SCOPES"):
        Oidc.of(Settings(db_dsn="postgresql://x/y", oidc_issuer="https://id.example.com", oidc_client_id="c",
                         oidc_client_secret="s", oidc_scopes="email"))
    oidc = Oidc.of(Settings(db_dsn="postgresql://x/y", oidc_issuer="https://id.example.com/", oidc_client_id="c",
                            oidc_client_secret="s", oidc_roles_json='{"a": "viewer", "b": "admin"}'))
    assert oidc is not None and oidc.issuer == "https://id.example.com"
    assert oidc.user_of({"email": "x@y.z", "groups": ["a", "b"]}) == ("x@y.z", Role.ADMIN)
