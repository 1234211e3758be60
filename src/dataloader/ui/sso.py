"""Single sign-on to the console with OpenID Connect (docs/security.md "Single sign-on").

The console is the relying party of one provider (DL_OIDC_ISSUER), with the authorization code
flow, PKCE (S256), a `state` bound to the browser and a `nonce` bound to the ID token. Authlib's
client builds the authorization request and exchanges the code (client_secret_basic); the ID
token's signature is checked against the provider's published keys, and its issuer, audience,
expiry and nonce with joserfc (Authlib's JOSE library). The provider's claims then name the user
(DL_OIDC_NAME_CLAIM, lower-cased, a user name by model/user.py's rule) and give the role
(DL_OIDC_ROLE_CLAIM through DL_OIDC_ROLES_JSON, else DL_OIDC_DEFAULT_ROLE, else refused). The
signed-in person is an ordinary user of dl_users from then on: a session of theirs, their role read
each request, disabled by an admin like any other.

The flow's secrets (state, nonce, the PKCE verifier, where to go next) wait in a cookie of their
own for ten minutes: HttpOnly, path /ui/login/oidc, SameSite=Lax (the provider's redirect back is
a cross-site navigation, which a Strict cookie would miss). Authlib and httpx are the `sso` extra:
imported only when single sign-on is configured."""

from __future__ import annotations

import base64
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from dataloader.config import Settings
from dataloader.exceptions import ConfigError
from dataloader.model import user as rules
from dataloader.model.principal import Role

STATE_COOKIE = "dl_oidc"
STATE_TTL_SEC = 600
# Roles by rank: of several a person's claims map to, the highest wins.
_RANK = {role: rank for rank, role in enumerate(Role)}


class SsoRefused(Exception):
    """A sign-in the console refuses: the message is for the login page (never a secret)."""


@dataclass(frozen=True)
class Oidc:
    issuer: str
    client_id: str
    client_secret: str
    scopes: str
    name_claim: str
    role_claim: str
    roles: dict[str, Role]
    default_role: Role | None

    @classmethod
    def of(cls, settings: Settings) -> Oidc | None:
        """The provider of the settings, None without DL_OIDC_ISSUER; ConfigError when half set."""
        if not settings.oidc_issuer:
            return None
        for variable, value in (("DL_OIDC_CLIENT_ID", settings.oidc_client_id),
                                ("DL_OIDC_CLIENT_SECRET", settings.oidc_client_secret)):
            if not value:
                raise ConfigError(variable, "is required with DL_OIDC_ISSUER")
        if "openid" not in settings.oidc_scopes.split():
            raise ConfigError("DL_OIDC_SCOPES", "must include openid")
        try:
            import authlib  # noqa: F401
            import httpx  # noqa: F401
        except ImportError:
            raise ConfigError("DL_OIDC_ISSUER", "single sign-on needs the sso extra: pip install 'dataloader[sso]'") \
                from None
        return cls(settings.oidc_issuer.rstrip("/"), settings.oidc_client_id or "", settings.oidc_client_secret or "",
                   settings.oidc_scopes, settings.oidc_name_claim, settings.oidc_role_claim,
                   dict(settings.oidc_roles_json), settings.oidc_default_role)

    async def metadata(self) -> dict[str, Any]:
        """The provider's configuration (asked at each sign-in: a provider may rotate its keys)."""
        import httpx

        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.get(f"{self.issuer}/.well-known/openid-configuration")
            answer.raise_for_status()
            found: dict[str, Any] = answer.json()
        if found.get("issuer", "").rstrip("/") != self.issuer:
            raise SsoRefused("the provider names another issuer than DL_OIDC_ISSUER")
        return found

    def client(self, redirect_uri: str) -> Any:
        from authlib.integrations.httpx_client import AsyncOAuth2Client

        return AsyncOAuth2Client(client_id=self.client_id, client_secret=self.client_secret, scope=self.scopes,
                                 redirect_uri=redirect_uri, code_challenge_method="S256", timeout=10)

    def user_of(self, claims: dict[str, Any]) -> tuple[str, Role]:
        """The user name and role the claims give; SsoRefused when they give none."""
        given = claims.get(self.name_claim)
        if self.name_claim == "email" and claims.get("email_verified") is False:
            raise SsoRefused("the provider has not verified this e-mail address")
        try:
            name = rules.user_name(given.lower() if isinstance(given, str) else given)
        except ValueError:
            raise SsoRefused(f"the provider's {self.name_claim!r} claim is not a user name here") from None
        values = claims.get(self.role_claim)
        values = [values] if isinstance(values, str) else values if isinstance(values, list) else []
        matched = [self.roles[v] for v in values if isinstance(v, str) and v in self.roles]
        role = max(matched, key=_RANK.__getitem__) if matched else self.default_role
        if role is None:
            raise SsoRefused(f"{name} has no role here: none of their {self.role_claim!r} is in DL_OIDC_ROLES_JSON")
        return name, role


def redirect_uri(request: Request) -> str:
    root = request.scope.get("root_path", "")
    return str(request.url.replace(path=root + "/login/oidc/callback", query="", fragment=""))


async def start(oidc: Oidc, request: Request, next_path: str) -> tuple[str, str]:
    """(the provider's authorization URL, the state cookie's value)."""
    meta = await oidc.metadata()
    state, nonce, verifier = secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(48)
    async with oidc.client(redirect_uri(request)) as client:
        url, _ = client.create_authorization_url(meta["authorization_endpoint"], state=state, nonce=nonce,
                                                 code_verifier=verifier)
    kept = {"state": state, "nonce": nonce, "verifier": verifier, "next": next_path}
    return url, base64.urlsafe_b64encode(json.dumps(kept).encode()).decode()


def kept_state(cookie: str | None) -> dict[str, str]:
    try:
        kept = json.loads(base64.urlsafe_b64decode((cookie or "").encode()))
    except ValueError:
        kept = None
    if not isinstance(kept, dict) or not all(isinstance(kept.get(k), str) for k in ("state", "nonce", "verifier")):
        raise SsoRefused("the sign-in started too long ago or in another browser; try again")
    return kept


async def finish(oidc: Oidc, request: Request, kept: dict[str, str]) -> dict[str, Any]:
    """The verified claims of the person the provider sent back (ID token, then user info)."""
    from joserfc import jwt
    from joserfc.errors import JoseError
    from joserfc.jwk import KeySet

    params = request.query_params
    if "error" in params:
        raise SsoRefused(f"the provider refused: {params.get('error')} {params.get('error_description', '')}".strip())
    if not hmac.compare_digest(params.get("state", "").encode(), kept["state"].encode()):
        raise SsoRefused("the sign-in's state does not match this browser's; try again")
    meta = await oidc.metadata()
    async with oidc.client(redirect_uri(request)) as client:
        token = await client.fetch_token(meta["token_endpoint"], code=params.get("code", ""),
                                         code_verifier=kept["verifier"])
        id_token = token.get("id_token")
        if not id_token:
            raise SsoRefused("the provider sent no ID token")
        keys = (await client.get(meta["jwks_uri"])).json()
        try:
            decoded = jwt.decode(id_token, KeySet.import_key_set(keys))
            jwt.JWTClaimsRegistry(iss={"essential": True, "value": oidc.issuer},
                                  aud={"essential": True, "value": oidc.client_id},
                                  nonce={"essential": True, "value": kept["nonce"]},
                                  sub={"essential": True}, exp={"essential": True}).validate(decoded.claims)
        except (JoseError, ValueError) as exc:
            raise SsoRefused(f"the provider's ID token does not check out ({type(exc).__name__})") from None
        claims = dict(decoded.claims)
        if (oidc.name_claim not in claims or oidc.role_claim not in claims) and meta.get("userinfo_endpoint"):
            info = (await client.get(meta["userinfo_endpoint"])).json()
            if isinstance(info, dict) and info.get("sub") == claims["sub"]:
                claims = {**info, **claims}
    return claims
