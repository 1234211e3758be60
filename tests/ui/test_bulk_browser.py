"""Bulk actions and top errors in the browser: from a jobs search to a bulk retry (requeue) with
its dry-run count first, then the operation's live progress reaching the end and its audit trail;
the top errors page groups the failures and links to their jobs."""

from __future__ import annotations

from tests.support.engine import enqueue
from tests.ui.browser import browser, match_count, serve, sign_in

FAILED = 30


async def test_top_errors_then_a_bulk_retry_with_its_dry_run_and_live_progress(python, subprocess_env, db, tmp_path):
    ids = [await enqueue(db, "dl.noop", queue="bulk", args={"n": n}) for n in range(FAILED)]
    await db.execute("UPDATE dl_jobs SET status = 'failed', finished_at = now(), attempt = 1, "
                     "error = 'ValueError: boom ' || (args->>'n') || E'\\nTraceback ...' WHERE job_id = ANY($1)", ids)
    await db.execute("UPDATE dl_jobs SET error = E'KeyError: missing\\nTraceback ...' WHERE job_id = ANY($1)", ids[:5])
    async with serve(python, subprocess_env, tmp_path) as service:
        async with browser("bulk") as seen:
            await sign_in(seen, service)
            page = seen.page
            await page.goto(f"{service.base_url}/ui/errors")
            group = page.locator("table.errors tr", has_text="KeyError: missing")
            assert await group.locator("td.num").inner_text() == "5"
            await seen.shot("errors")
            await group.locator("td.errtext a").click()
            assert (await match_count(page)).startswith("5 matching jobs")
            await seen.shot("errors-jobs")

            await page.goto(f"{service.base_url}/ui/jobs?queue=bulk&status=failed")
            assert (await match_count(page)).startswith(f"{FAILED} matching jobs")
            await page.click("text=Bulk action on these…")
            await page.check('input[name="kind"][value="requeue"]')
            await page.click("#dry-run")
            await page.wait_for_selector("#dry-run-count")
            assert (await page.inner_text("#dry-run-count")).startswith(f"{FAILED} jobs to examine for requeue")
            assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = 'bulk' AND status = 'failed'") \
                == FAILED, "a dry run writes nothing"
            await seen.shot("bulk-dry-run")

            operations = await db.fetchval("SELECT count(*) FROM dl_operations")
            await page.click("#start-operation")
            await page.wait_for_selector("#confirm-action")  # a bulk start asks first, as the CLI does
            assert await db.fetchval("SELECT count(*) FROM dl_operations") == operations, "nothing started yet"
            await page.click("#confirm-action")
            await page.wait_for_url("**/ui/operations/*")
            assert (await page.inner_text("#notice")).endswith(f"started: requeue on {FAILED} jobs.")
            await page.wait_for_function(
                "() => document.querySelector('#operation-state').textContent.trim() === 'finished'", timeout=30_000)
            assert await page.inner_text("#operation-progress") == f"{FAILED} / {FAILED}"
            assert await page.locator("ol.timeline li").count() >= 2, "the audit trail"
            await seen.shot("operation-finished")
            operation_id = page.url.rsplit("/", 1)[1]
            await page.goto(f"{service.base_url}/ui/operations")
            assert await page.locator(f'tr[data-operation="{operation_id}"]').count() == 1
            await seen.shot("operations")
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = 'bulk' AND status = 'queued'") == FAILED
