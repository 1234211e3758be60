"""dataloader's side of `python -m bench workflows`, through its public API (`App`,
`app.workflows`), with the project venv. Actions (each prints one JSON line last):
- `install`: migrate the schema.
- `enqueue --kind K --count N [--steps S] [--lease-ttl L]`: `app.workflows.start` once per run,
  one call after another (`plain`: `app.enqueue("dl.noop")`, the plain job), queue `bench`.
  Timed around the loop.
- `fanout --children N`: `app.workflows.start("bench.fanout", N)`, then
  `app.workflows.result(run_id)` (it polls the run from 20 ms, doubling up to 1 s).
The worker is the real CLI (`python -m dataloader worker`), started by the harness."""

from __future__ import annotations

import argparse
import json
import time

import uvloop

import bench.drivers.dl_workflows  # noqa: F401  (registers the workflows: start() needs them)
import dataloader

KINDS = {"three": "bench.three", "steps": "bench.steps", "slow": "bench.slow", "child": "bench.child"}


async def run(args: argparse.Namespace) -> dict:
    settings = dataloader.Settings(db_dsn=args.dsn, workers=[], db_pool_extra=2)
    if args.action == "install":
        app = dataloader.App(settings)
        await app.open(migrate_schema=True)
        await app.close()
        return {"ok": True}
    async with dataloader.App(settings) as app:
        if args.action == "enqueue":
            arg = args.steps if args.kind in ("steps", "slow") else 0
            started = time.perf_counter()
            if args.kind == "plain":
                for _ in range(args.count):
                    await app.enqueue("dl.noop", queue="bench")
            else:
                for _ in range(args.count):
                    await app.workflows.start(KINDS[args.kind], arg, lease_ttl_sec=args.lease_ttl)
            return {"count": args.count, "seconds": time.perf_counter() - started}
        started = time.perf_counter()
        run_id = await app.workflows.start("bench.fanout", args.children)
        value = await app.workflows.result(run_id, timeout=args.timeout)
        return {"run_id": str(run_id), "result": value, "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=["install", "enqueue", "fanout"])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--kind", default="three")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--children", type=int, default=1000)
    parser.add_argument("--lease-ttl", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    print(json.dumps(uvloop.run(run(args))))


if __name__ == "__main__":
    main()
