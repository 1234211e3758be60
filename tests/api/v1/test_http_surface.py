"""The HTTP surface around the jobs API: /docs and /redoc work offline, the OpenAPI schema declares
bearer auth only when a token is configured, HEAD probes, and the route label of refused requests."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dataloader.api import create_app
from dataloader.api.middleware import flat_routes
from tests.api.v1.conftest import client_for
from tests.api.v1.constants import TRIGGER, job_body

TOKEN = "s3cret"


@pytest.fixture
async def token_client(db, app_ctx) -> AsyncIterator[httpx.AsyncClient]:
    settings = app_ctx.settings.model_copy(update={"api_token": TOKEN})
    async with client_for(create_app(settings, context=app_ctx)) as c:
        yield c


class AssetLinks(HTMLParser):
    """Every URL an HTML page loads: src/href attributes, and `url: '...'` in inline scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_script = tag == "script"
        for name, value in attrs:
            if name in ("src", "href", "spec-url") and value:
                self.urls.append(value)

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.urls += re.findall(r"https?://[^\s'\"<>]+", data)
            self.urls += re.findall(r"\burl:\s*'([^']+)'", data)
        else:
            self.urls += re.findall(r"https?://[^\s'\"<>]+", data)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_docs_pages_load_only_local_assets_and_they_answer(client, page):
    response = await client.get(page)
    assert response.status_code == 200
    parser = AssetLinks()
    parser.feed(response.text)
    assert parser.urls, response.text
    for url in parser.urls:
        absolute = urljoin(str(response.url), url)
        assert urlsplit(absolute).netloc == "dataloader.test", f"{page} loads {url} from elsewhere"
        asset = await client.get(absolute)
        assert asset.status_code == 200, (url, asset.status_code)
        assert asset.content, url
    # The page really is Swagger UI / ReDoc, with its script among the local assets.
    assert any(url.endswith(("swagger-ui-bundle.js", "redoc.standalone.js")) for url in parser.urls)


async def test_openapi_declares_an_optional_bearer_without_a_token(client):
    """Without DL_API_TOKEN the API is open until an API token exists (docs/security.md), so every
    /api/ route takes a bearer or nothing (`{}`), and documents its 401, its 403 and its action."""
    schema = (await client.get("/openapi.json")).json()
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if not path.startswith("/api/"):
                assert "security" not in operation and "401" not in operation["responses"], (method, path)
                continue
            assert operation["x-dataloader-action"] and operation["x-dataloader-scopes"], (method, path)
            assert "403" in operation["responses"], (method, path)
            if path != "/api/v1/workflows/tokens/{token}":
                assert operation["security"] == [{"bearer": []}, {}], (method, path)
                assert "401" in operation["responses"], (method, path)


async def test_openapi_declares_bearer_auth_on_the_api_with_a_token(token_client, app_ctx):
    schema = (await token_client.get("/openapi.json")).json()
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert "DL_API_TOKEN" in schema["components"]["securitySchemes"]["bearer"]["description"]
    api_ops = 0
    # every /api/ operation the app routes (counted from the routes, not from the schema under test)
    routes = flat_routes(create_app(app_ctx.settings, context=app_ctx).routes)
    expected = sum(len(route.methods - {"HEAD"}) for route in routes
                   if getattr(route, "path", "").startswith("/api/") and getattr(route, "include_in_schema", False))
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if path == "/api/v1/workflows/tokens/{token}" and method == "post":
                api_ops += 1  # a wait token's completion: the token is its credential
                assert "security" not in operation and "401" not in operation["responses"], operation
                assert operation["x-dataloader-action"] == "enqueue", operation
            elif path.startswith("/api/"):
                api_ops += 1
                assert operation["security"] == [{"bearer": []}], (method, path)
                assert operation["responses"]["401"]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorResponse"}
                # wrong tokens from one address are throttled (auth_throttle.py)
                assert "too_many_failures" in operation["responses"]["429"]["description"], (method, path)
            else:  # probes, metrics and docs stay open
                assert "security" not in operation, (method, path)
    assert api_ops == expected and api_ops >= 6


@pytest.mark.parametrize("path", ["/health", "/status"])
async def test_head_probes_answer_200(client, path):
    response = await client.head(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"


def http_requests(text: str) -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["method"], s.labels["route"], s.labels["status"]): s.value
        for family in text_string_to_metric_families(text) if family.name == "dl_http_requests"
        for s in family.samples if s.name == "dl_http_requests_total"
    }


async def test_requests_refused_before_routing_are_labelled_with_their_route(token_client, db):
    before = http_requests((await token_client.get("/metrics")).text)
    job = "/api/v1/jobs/00000000-0000-0000-0000-000000000001"
    assert (await token_client.post(TRIGGER, json=job_body())).status_code == 401
    assert (await token_client.get(f"{job}/status")).status_code == 401
    assert (await token_client.get("/api/v1/jobs")).status_code == 401
    # Too large, refused by the same guard before routing (with the token, so past the 401).
    big = await token_client.post(TRIGGER, content=b"x", headers={
        "Authorization": f"Bearer {TOKEN}", "Content-Length": str(10**9)})
    assert big.status_code == 413
    # A path no route has is still `unmatched`.
    assert (await token_client.get("/api/v1/nothing-here")).status_code == 401
    after = http_requests((await token_client.get("/metrics")).text)

    def delta(key: tuple[str, str, str]) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta(("POST", "/api/v1/jobs/trigger", "401")) == 1
    assert delta(("GET", "/api/v1/jobs/{job_id}/status", "401")) == 1
    assert delta(("GET", "/api/v1/jobs", "401")) == 1
    assert delta(("POST", "/api/v1/jobs/trigger", "413")) == 1
    assert delta(("GET", "unmatched", "401")) == 1
