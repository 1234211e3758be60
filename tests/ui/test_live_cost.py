"""Live updates cost one poll per node, not one per browser: with 50 browsers subscribed to the
overview, a real `dataloader serve` runs about the statements it runs for one (measured as the
database's transaction count, pg_stat_database), where a poll per browser would be 50 times that."""

from __future__ import annotations

import asyncio
import contextlib

import httpx

from tests.ui.browser import serve
from tests.ui.conftest import signed_in

WINDOW_SEC = 4.0
CLIENTS = 50


async def transactions(db) -> int:
    # pg_stat_database is flushed by each backend at most once a second: the windows are long enough
    return await db.fetchval("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                             "WHERE datname = current_database()")


async def rate(db) -> float:
    """Transactions per second of this database over WINDOW_SEC, after a second to let stats flush."""
    await asyncio.sleep(1.2)  # the stats collector's flush interval (1 s), not a synchronisation
    before = await transactions(db)
    await asyncio.sleep(WINDOW_SEC)  # a measuring window: the quantity is what happens during it
    await asyncio.sleep(1.2)
    return (await transactions(db) - before) / (WINDOW_SEC + 1.2)


async def test_fifty_live_browsers_do_not_cost_fifty_polls(python, subprocess_env, db, tmp_path, record_property):
    async with serve(python, subprocess_env, tmp_path) as service:
        limits = httpx.Limits(max_connections=CLIENTS + 5)
        async with httpx.AsyncClient(base_url=service.base_url, timeout=30, limits=limits) as http:
            await signed_in(http, service.token or "")  # one session, shared by the fifty streams
            idle = await rate(db)

            async def subscribe(stack: contextlib.AsyncExitStack) -> None:
                response = await stack.enter_async_context(http.stream("GET", "/ui/live?topic=overview"))
                assert response.status_code == 200
                chunks = response.aiter_text()
                assert (await anext(chunks)).startswith(": connected")
                # keep reading in the background so the server never blocks on a full socket
                task = asyncio.create_task(_drain(chunks))
                stack.callback(task.cancel)

            async with contextlib.AsyncExitStack() as stack:
                await subscribe(stack)
                one = await rate(db)
            async with contextlib.AsyncExitStack() as stack:
                await asyncio.gather(*(subscribe(stack) for _ in range(CLIENTS)))
                fifty = await rate(db)
    record_property("live_tx_per_sec", {"idle": round(idle, 1), "one": round(one, 1), "fifty": round(fifty, 1)})
    print(f"transactions/s: idle {idle:.1f}, 1 live client {one:.1f}, {CLIENTS} live clients {fifty:.1f}")
    per_poller = one - idle
    assert per_poller > 0.5, f"the live poll was not seen at all: idle {idle:.1f}/s, one client {one:.1f}/s"
    # one poll for fifty: at most twice the cost of one client (timing noise), not fifty times
    assert fifty - idle <= 2 * per_poller + 2, (idle, one, fifty)


async def _drain(chunks) -> None:
    with contextlib.suppress(Exception):
        async for _ in chunks:
            pass
