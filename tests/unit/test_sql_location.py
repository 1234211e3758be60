"""All SQL lives in `src/dataloader/storage/` (DESIGN: "storage: ... all SQL lives here"): a .py
file anywhere else in the package whose string literals hold a SQL statement fails this test.
LISTEN/NOTIFY set-up through the driver's API is not SQL text and is fine."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import dataloader

PACKAGE_ROOT = Path(dataloader.__file__).parent
STORAGE = PACKAGE_ROOT / "storage"

# A statement keyword at the start of the literal (or of a line in it), followed by what that
# statement needs next: enough to catch a query, not an English sentence that says "select".
SQL_STATEMENT = re.compile(
    r"""(?imx)^\s*(?:
        SELECT\s+(?:\*|DISTINCT\b|[\w"(]+(?:\s*[,(.]|\s+(?:AS|FROM)\b)|\d+\b|[\w"]+\s*$|[\w"(]+\s+FROM\b)
      | INSERT\s+INTO\s+[\w".]+\s*(?:\(|VALUES\b|SELECT\b|DEFAULT\b)
      | UPDATE\s+[\w".]+(?:\s+(?:AS\s+)?\w+)?\s+SET\b
      | DELETE\s+FROM\s+[\w".]+(?:\s+(?:AS\s+)?\w+)?\s*(?:WHERE\b|USING\b|RETURNING\b|;|$)
      | WITH\s+(?:RECURSIVE\s+)?\w+\s+AS\s*\(
      | (?:CREATE|ALTER|DROP)\s+(?:TABLE|INDEX|TYPE|FUNCTION|TRIGGER|SCHEMA|EXTENSION)\b
      | (?:NOTIFY|LISTEN|UNLISTEN)\s+\w+\s*[;,]?\s*$
    )""")


def sql_literals(source: str, filename: str = "<src>") -> list[tuple[int, str]]:
    """(line, text) of every string literal (f-strings included) that holds a SQL statement."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "x" for v in node.values)
        else:
            continue
        if SQL_STATEMENT.search(text):
            found.append((node.lineno, text.strip().splitlines()[0][:80]))
    return found


def test_no_sql_outside_storage() -> None:
    offenders = []
    checked = 0
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        if STORAGE in path.parents:
            continue
        checked += 1
        for line, text in sql_literals(path.read_text(encoding="utf-8"), str(path)):
            offenders.append(f"{path.relative_to(PACKAGE_ROOT.parent)}:{line}: {text!r}")
    assert checked > 20, "the walk did not find the package's modules"
    assert not offenders, "SQL outside src/dataloader/storage/ (put it in storage/queries/):\n" + "\n".join(offenders)


def test_the_pattern_finds_statements_and_ignores_prose() -> None:
    """The guard can fail: each kind of statement is found, in plain and f-strings."""
    statements = [
        'await conn.fetchval("SELECT 1")',
        'q = "select job_id, status from dl_jobs where queue = $1"',
        'q = "SELECT count(*) FROM dl_jobs"',
        'q = "SELECT to_regclass(\'x\') IS NOT NULL"',
        'q = "SELECT pg_advisory_lock(:id)"',
        'q = "SELECT version_num\\nFROM alembic_version"',
        'q = f"INSERT INTO {table} (a) VALUES ($1)"',
        'q = "UPDATE dl_jobs SET status = \'queued\'"',
        'q = "DELETE FROM dl_job_events WHERE job_id = $1"',
        'q = "delete from dl_jobs"',
        'q = """\n    WITH picked AS (SELECT 1) SELECT * FROM picked"""',
        'q = "CREATE INDEX ix ON t (a)"',
        'q = "NOTIFY dl_jobs"',
    ]
    for source in statements:
        assert sql_literals(source), source
    prose = [
        '"""Select the jobs to run, then update their leases."""',
        'log.info("select a queue with update rights", extra={})',
        'msg = "with the lease taken, the worker runs the pipeline"',
        'msg = "delete from the ledger the locks that were released"',
        'msg = "insert into the queue what the user asked for"',
        'help = "update the settings, then select a worker"',
        'JOBS_CHANNEL = "dl_jobs"',
    ]
    for source in prose:
        assert not sql_literals(source), source
