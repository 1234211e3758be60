"""What the bearer check costs on the trigger path (issue 40): POST /api/v1/jobs/trigger through the
HTTP app in process (httpx's ASGI transport: the guard, the route, the App, no network) with no
auth configured, with DL_API_TOKEN, and with an API token (`dlt_…`, looked up and cached by
tokens/manager.py), in interleaved rounds so the three share the machine's load.

    BENCH_DSN=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python -m bench.api_tokens \
        [--requests 2000] [--clients 8] [--rounds 3]

A fresh database (`teams_tokens_bench_<hex>`, dropped afterwards). Each round: every token revoked
(the API is open), a run without a bearer; a token created, a run with it; a run with DL_API_TOKEN.
Reported: this process's CPU per request (client and server share it, so the ratio, not the
absolute, is the number) and requests/s, the median over the rounds, and the ratios to the open
API; and the guard's decision alone (api/access.py `resolve`, warm cache) in CPU microseconds per
request, each way. Results: bench/results/api-tokens-<UTC>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import httpx

from bench.pg import with_database

RESULTS = Path(__file__).resolve().parent / "results"
ADMIN = "bench-admin-token"


async def one_run(app: object, requests: int, clients: int, headers: dict[str, str], tag: str) -> dict[str, float]:
    counter = iter(range(requests))
    failures: list[str] = []

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") as client:
        async def loop() -> None:
            for i in counter:
                r = await client.post("/api/v1/jobs/trigger", headers=headers,
                                      json={"queue": "bench", "task": "dl.noop", "lock_key": f"{tag}-{i}", "args": {}})
                if r.status_code != 201:
                    failures.append(f"{r.status_code} {r.text[:200]}")

        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(clients)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if failures:
        raise RuntimeError(f"{len(failures)} failed triggers, e.g. {failures[0]}")
    return {"cpu_us_per_request": cpu / requests * 1e6, "rps": requests / wall}


async def guard_cost(runtime: object, headers: dict[str, str], calls: int) -> float:
    """CPU microseconds of the guard's decision alone (api/access.py `resolve`) per request, warm."""
    from dataloader.api.access import resolve

    authorization = headers.get("Authorization")
    await resolve(runtime, "POST", "/api/v1/jobs/trigger", authorization, "127.0.0.1")  # type: ignore[arg-type]
    cpu = time.process_time()
    for _ in range(calls):
        await resolve(runtime, "POST", "/api/v1/jobs/trigger", authorization, "127.0.0.1")  # type: ignore[arg-type]
    return (time.process_time() - cpu) / calls * 1e6


async def main(args: argparse.Namespace) -> dict[str, object]:
    from dataloader import App, Settings
    from dataloader.api import create_app
    from dataloader.storage import migrate

    admin_dsn = os.environ["BENCH_DSN"]
    name = f"teams_tokens_bench_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(admin_dsn)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    dsn = with_database(admin_dsn, name)
    runs: dict[str, list[dict[str, float]]] = {"open": [], "api_token": [], "dl_api_token": []}
    guard: dict[str, float] = {}
    try:
        await migrate.upgrade(dsn)
        app = await App(Settings(db_dsn=dsn, workers=[], log_level="WARNING")).open()
        try:
            open_app = create_app(app.settings, context=app)
            admin_app = create_app(app.settings.model_copy(update={"api_token": ADMIN}), context=app)
            await one_run(open_app, 200, args.clients, {}, "warm")  # routes built, pool warm
            for round_no in range(args.rounds):
                for token in await app.tokens.list(include_revoked=False):
                    await app.tokens.revoke(token.id)
                runs["open"].append(await one_run(open_app, args.requests, args.clients, {}, f"o{round_no}"))
                created = await app.tokens.create(name=f"bench-{round_no}", scopes=["enqueue"])
                bearer = {"Authorization": f"Bearer {created.secret}"}
                runs["api_token"].append(await one_run(open_app, args.requests, args.clients, bearer, f"t{round_no}"))
                runs["dl_api_token"].append(await one_run(admin_app, args.requests, args.clients,
                                                          {"Authorization": f"Bearer {ADMIN}"}, f"a{round_no}"))
                if round_no == args.rounds - 1:  # the guard alone, each way, on the last round's token
                    guard["api_token"] = await guard_cost(open_app.state.runtime, bearer, 20000)
                    guard["dl_api_token"] = await guard_cost(admin_app.state.runtime,
                                                             {"Authorization": f"Bearer {ADMIN}"}, 20000)
                    await app.tokens.revoke(created.token.id)
                    guard["open"] = await guard_cost(open_app.state.runtime, {}, 20000)
                print(f"round {round_no + 1}: " + ", ".join(
                    f"{k} {v[-1]['cpu_us_per_request']:.0f} us CPU/req {v[-1]['rps']:.0f} req/s"
                    for k, v in runs.items()), flush=True)
        finally:
            await app.close()
    finally:
        conn = await asyncpg.connect(admin_dsn)
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()
    median = {kind: {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
              for kind, rounds in runs.items()}
    base = median["open"]["cpu_us_per_request"]
    report: dict[str, object] = {
        "requests": args.requests, "clients": args.clients, "rounds": args.rounds, "median": median,
        "cpu_ratio_to_open": {kind: round(m["cpu_us_per_request"] / base, 3) for kind, m in median.items()},
        "guard_cpu_us_per_request": {kind: round(us, 2) for kind, us in guard.items()},
        "runs": runs,
    }
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    result = asyncio.run(main(parser.parse_args()))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"api-tokens-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({key: result[key] for key in ("median", "cpu_ratio_to_open", "guard_cpu_us_per_request")},
                     indent=2))
    print(f"written: {out}")
