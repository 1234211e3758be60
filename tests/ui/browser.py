"""The console's browser harness: a real `dataloader serve` and Debian's chromium driven by
Playwright (never a downloaded browser), a screenshot of every page visited as a test artifact,
and a failure on any browser console error or uncaught page error.

Chromium missing: the test skips with the reason, except under CI (env CI set), where it fails:
.ci/run installs the browser, so a CI run without one is broken, not excused."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, wait_until

TOKEN = "console-test-token"


def chromium_path() -> str:
    """The system chromium, or skip (locally) / fail (CI) with the reason."""
    found = os.environ.get("DL_TEST_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    reason = "no chromium on this machine (Debian: apt-get install chromium); .ci/run installs it"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def artifacts_dir() -> Path:
    folder = Path(os.environ.get("DL_TEST_ARTIFACTS") or ROOT / "test-artifacts") / "console"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Service:
    base_url: str
    proc: asyncio.subprocess.Process
    stderr: Path
    token: str | None = TOKEN

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")[-4000:]


@contextlib.asynccontextmanager
async def serve(python: str, env: dict[str, str], tmp_path: Path, *, token: str | None = TOKEN,
                extra_env: dict[str, str] | None = None, name: str = "serve") -> AsyncIterator[Service]:
    """`python -m dataloader serve` on a free port until the block ends (SIGTERM, then kill)."""
    port = free_port()
    full = {**env, "DL_HEARTBEAT_SEC": "0.5", "DL_SHUTDOWN_TIMEOUT_SEC": "3", "DL_UI_LIVE_POLL_SEC": "0.3",
            "WORKERS_JSON": '[{"queue": "default", "concurrency": 4}]', "DL_NODE_NAME": name, **(extra_env or {})}
    if token:
        full["DL_API_TOKEN"] = token
    stderr_path = tmp_path / f"{name}.stderr"
    with stderr_path.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(python, "-m", "dataloader", "serve", "--port", str(port),
                                                    env=full, stdout=asyncio.subprocess.DEVNULL, stderr=stderr)
    service = Service(f"http://127.0.0.1:{port}", proc, stderr_path, token)
    try:
        async with httpx.AsyncClient(base_url=service.base_url, timeout=5) as http:
            async def ready() -> bool:
                if proc.returncode is not None:
                    raise AssertionError(f"serve exited early: {service.log()}")
                try:
                    return (await http.get("/status")).status_code == 200
                except httpx.TransportError:
                    return False
            await wait_until(ready, timeout=60, interval=0.1, message="serve to be ready")
        yield service
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), timeout=20)
            except TimeoutError:
                proc.kill()
                await proc.wait()


@dataclass
class Browser:
    """One page in a fresh context, the errors it logged, and its screenshots."""

    page: object
    name: str
    errors: list[str] = field(default_factory=list)
    shots: list[Path] = field(default_factory=list)

    async def shot(self, label: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{self.name}-{label}")[:120]
        path = artifacts_dir() / f"{safe}.png"
        # caret="initial": hiding the caret sets `caret-color: transparent !important` on inputs; a
        # live swap then settling that style attribute broke the console's CSP (style-src 'self')
        # timeout: a screenshot is an artifact, not a check of speed; a full page of the suite's database
        # (every test's queues) took over 15 s to capture on a loaded 2-core machine
        await self.page.screenshot(path=str(path), full_page=True, caret="initial", timeout=60_000)
        self.shots.append(path)
        return path

    def check_no_errors(self) -> None:
        assert not self.errors, "the browser logged errors:\n" + "\n".join(self.errors)


# This worker's one chromium and its Playwright, launched at the first browser test and closed at
# the end of the session (tests/ui/conftest.py): each test gets a fresh context of its own (no
# cookie, storage or cache of another test), without a browser start of about a second of CPU each.
_CHROMIUM: dict[str, Any] = {}


async def _shared_chromium() -> Any:
    executable = chromium_path()
    found = _CHROMIUM.get("browser")
    if found is not None and found.is_connected():
        return found
    from playwright.async_api import async_playwright

    if "playwright" not in _CHROMIUM:
        _CHROMIUM["playwright"] = await async_playwright().start()
    _CHROMIUM["browser"] = await _CHROMIUM["playwright"].chromium.launch(
        executable_path=executable, headless=True, args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
    return _CHROMIUM["browser"]


async def close_shared_chromium() -> None:
    found, playwright = _CHROMIUM.pop("browser", None), _CHROMIUM.pop("playwright", None)
    if found is not None:
        await found.close()
    if playwright is not None:
        await playwright.stop()


@contextlib.asynccontextmanager
async def browser(name: str, *, viewport: tuple[int, int] = (1280, 800)) -> AsyncIterator[Browser]:
    chromium = await _shared_chromium()
    context = await chromium.new_context(viewport={"width": viewport[0], "height": viewport[1]},
                                         timezone_id="Europe/Berlin", locale="en-GB")
    try:
        page = await context.new_page()
        page.set_default_timeout(15_000)
        seen = Browser(page, name)
        page.on("console", lambda msg: seen.errors.append(f"console {msg.type}: {msg.text}")
                if msg.type == "error" else None)
        page.on("pageerror", lambda exc: seen.errors.append(f"page error: {exc}"))
        yield seen
        seen.check_no_errors()
    finally:
        await context.close()


async def sign_in(seen: Browser, service: Service) -> None:
    page = seen.page
    await page.goto(f"{service.base_url}/ui/")
    assert "/ui/login" in page.url, page.url
    await seen.shot("login")
    await page.fill("#token", service.token or "")
    await page.click("form[action$='/login'] button[type=submit]")
    await page.wait_for_url(f"{service.base_url}/ui/")


async def match_count(page) -> str:
    """The jobs page's count, once it has loaded (the page asks for it after rendering the results)."""
    await page.wait_for_function(
        "() => { const p = document.querySelector('#match-count'); return p && !p.textContent.includes('counting'); }")
    return await page.inner_text("#match-count")
