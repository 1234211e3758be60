"""A script that configured no logging sees what its pipelines log under `App.running`, and the
engine's failure warnings name the job (issue 24). Run as a fresh interpreter: the test process
has pytest's handlers on the root logger, which is exactly the case `ensure_visible` leaves alone."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

SCRIPT = '''
import asyncio, sys
from dataloader import App, FatalError, Queue, Settings, pipeline

@pipeline("logs.hello")
async def hello(ctx):
    ctx.log.info("hello from the pipeline")

@pipeline("logs.broken")
async def broken(ctx):
    raise FatalError("broken on purpose")

async def main():
    async with App(Settings(db_dsn=sys.argv[1], workers=[])) as app:
        jobs = [await app.enqueue("logs.hello", queue="logs-q"), await app.enqueue("logs.broken", queue="logs-q")]
        print(" ".join(str(j.id) for j in jobs), flush=True)
        async with app.running(queues=[Queue("logs-q", 2)], reaper=False):
            for job in jobs:
                while not (await app.get(job.id)).status.finished:
                    await asyncio.sleep(0.05)

asyncio.run(main())
'''


@pytest.mark.process  # a fresh interpreter with no logging set up
async def test_pipeline_logs_and_failures_show_with_the_job_id_without_any_logging_setup(dsn, db):
    proc = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", SCRIPT, dsn], capture_output=True, text=True, timeout=60,
        cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"), "DL_LOG_FORMAT": "json"})
    assert proc.returncode == 0, proc.stderr
    hello_id, broken_id = proc.stdout.split()
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    said = [line for line in lines if line["message"] == "hello from the pipeline"]
    assert said and said[0]["job_id"] == hello_id and said[0]["logger"] == "dataloader.pipeline.logs.hello"
    failed = [line for line in lines if line["message"].startswith("job failed")]
    assert failed and failed[0]["job_id"] == broken_id and "broken on purpose" in failed[0]["error"], lines
