"""All SQL lives in `src/dataloader/storage/` (DESIGN: "storage: ... all SQL lives here"), checked
on the parsed code of every other module of the package. Outside storage/ no module may

- call a database driver's statement methods (asyncpg's execute/executemany/fetch/fetchrow/
  fetchval/fetchmany/copy_*/cursor/prepare, psycopg's cursor/execute, SQLAlchemy's
  exec_driver_sql/execute),
- build a statement: import `dataloader.storage.queries` (the loader of the .sql files) or call
  its `sql(...)`, call SQLAlchemy's `text(...)`, or hold SQL text in a string literal.

Driver calls that run no SQL (LISTEN set-up through asyncpg's `add_listener`, `transaction()`,
`acquire()`) are not statement methods and need no exception. A call that only looks like a
driver call goes in ALLOWED with the reason it is not SQL."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import dataloader

PACKAGE_ROOT = Path(dataloader.__file__).parent
STORAGE = PACKAGE_ROOT / "storage"

DRIVER_METHODS = frozenset({
    "execute", "executemany", "fetch", "fetchrow", "fetchval", "fetchmany", "cursor", "prepare",
    "exec_driver_sql", "copy_from_query", "copy_from_table", "copy_to_table", "copy_records_to_table", "copy",
})
SQL_BUILDERS = frozenset({"sql", "text", "claim_sql", "claim_limited_sql", "fair_claim_sql"})
QUERY_MODULES = ("dataloader.storage.queries", "sqlalchemy")

# (module relative to the package, method or function name) -> why that call is not SQL.
# Every statement of the package runs in storage/.
ALLOWED: dict[tuple[str, str], str] = {
    ("workers/attempt.py", "copy_context"): "contextvars.copy_context(): the attempt's log context, not a COPY",
}

# A statement keyword at the start of a literal (or of a line in it), followed by what that
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


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants (examples in prose may show a caller's own SQL)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def offences(source: str, module: str = "<src>") -> list[str]:
    """What in `source` runs or builds SQL: "line: what" for each offence not in ALLOWED."""
    tree = ast.parse(source, filename=module)
    found: list[str] = []
    docstrings = _docstrings(tree)
    sqlalchemy_text = False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "dataloader.storage.queries" or node.module.startswith("dataloader.storage.queries."):
                found.append(f"{node.lineno}: imports the statement loader {node.module}")
            elif node.module.split(".")[0] == "sqlalchemy" and any(a.name == "text" for a in node.names):
                sqlalchemy_text = True
                found.append(f"{node.lineno}: imports sqlalchemy's text()")
            elif node.module == "dataloader.storage" and any(a.name == "queries" for a in node.names):
                found.append(f"{node.lineno}: imports the statement loader dataloader.storage.queries")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("dataloader.storage.queries"):
                    found.append(f"{node.lineno}: imports the statement loader {alias.name}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and (func.attr in DRIVER_METHODS or func.attr.startswith("copy_")):
                name = func.attr
                what = f"calls the driver method .{name}()"
            elif isinstance(func, ast.Name) and func.id in SQL_BUILDERS and (func.id != "text" or sqlalchemy_text
                                                                               or node.args):
                name = func.id
                what = f"builds a statement with {name}()"
            elif isinstance(func, ast.Attribute) and func.attr == "text" and isinstance(func.value, ast.Name) \
                    and func.value.id in {"sa", "sqlalchemy"}:
                name = "text"
                what = "builds a statement with sqlalchemy.text()"
            else:
                continue
            if (module, name) not in ALLOWED:
                found.append(f"{node.lineno}: {what}")
        elif isinstance(node, ast.Constant | ast.JoinedStr) and id(node) not in docstrings:
            if isinstance(node, ast.Constant):
                if not isinstance(node.value, str):
                    continue
                text = node.value
            else:
                text = "".join(v.value if isinstance(v, ast.Constant) else "x" for v in node.values)
            if SQL_STATEMENT.search(text):
                found.append(f"{node.lineno}: SQL text {text.strip().splitlines()[0][:60]!r}")
    return found


def outside_storage() -> list[Path]:
    return [p for p in sorted(PACKAGE_ROOT.rglob("*.py")) if STORAGE not in p.parents]


def test_no_module_outside_storage_runs_or_builds_sql() -> None:
    paths = outside_storage()
    assert len(paths) > 20, "the walk did not find the package's modules"
    problems = []
    for path in paths:
        module = path.relative_to(PACKAGE_ROOT).as_posix()
        problems += [f"{module}:{o}" for o in offences(path.read_text(encoding="utf-8"), module)]
    assert not problems, ("SQL outside src/dataloader/storage/ (a repository method there, its statement in "
                          "storage/queries/):\n" + "\n".join(problems))


def test_every_allowance_names_a_module_and_a_reason() -> None:
    for (module, name), reason in ALLOWED.items():
        assert (PACKAGE_ROOT / module).is_file(), module
        assert name and len(reason) > 20, (module, name)


def test_the_check_fails_on_a_planted_offender(tmp_path: Path) -> None:
    """The guard can fail: a module that runs a statement itself, loads one, or holds one."""
    planted = '''
"""A capability that forgot the house rule. conn.execute("INSERT INTO orders ...") in prose is fine."""
from dataloader.storage.queries import sql
from sqlalchemy import text

async def tick(pool, conn, session):
    await pool.fetchval(sql("retention/prune_batch"), "q", "failed", 60, 100)
    await conn.execute("DELETE FROM dl_jobs WHERE job_id = $1", 1)
    rows = await conn.fetch(QUERY)
    async with conn.transaction():
        await conn.copy_records_to_table("dl_jobs", records=[])
    await session.execute(text("SELECT 1"))
    with conn.cursor() as cur:
        cur.executemany(QUERY, [])
    stmt = await conn.prepare(QUERY)
    query = f"UPDATE {table} SET status = 'queued'"

async def fine(conn, app):
    await conn.add_listener("dl_jobs", print)
    async with conn.transaction():
        return await app.enqueue("t", {"text": "select a queue, then update it"})
'''
    found = "\n".join(offences(planted, "planted.py"))
    for line, what in [
        (3, "imports the statement loader dataloader.storage.queries"),
        (4, "imports sqlalchemy's text()"),
        (7, "calls the driver method .fetchval()"),
        (7, "builds a statement with sql()"),
        (8, "calls the driver method .execute()"),
        (8, "SQL text 'DELETE FROM dl_jobs WHERE job_id = $1'"),
        (9, "calls the driver method .fetch()"),
        (11, "calls the driver method .copy_records_to_table()"),
        (12, "calls the driver method .execute()"),
        (12, "builds a statement with text()"),
        (12, "SQL text 'SELECT 1'"),
        (13, "calls the driver method .cursor()"),
        (14, "calls the driver method .executemany()"),
        (15, "calls the driver method .prepare()"),
        (16, "SQL text"),
    ]:
        assert f"{line}: {what}" in found, f"{line}: {what} not reported in:\n{found}"
    assert not [o for o in offences(planted, "planted.py") if int(o.split(":")[0]) > 16], found
    assert not [o for o in offences(planted, "planted.py") if o.startswith("2:")], found


def test_the_pattern_finds_statements_and_ignores_prose() -> None:
    """Literals: each kind of statement is found, in plain and f-strings; prose is not."""
    statements = [
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
        assert offences(source), source
    prose = [
        'def f():\n    """Select the jobs to run, then update their leases."""',
        'log.info("select a queue with update rights", extra={})',
        'msg = "with the lease taken, the worker runs the pipeline"',
        'msg = "delete from the ledger the locks that were released"',
        'msg = "insert into the queue what the user asked for"',
        'help = "update the settings, then select a worker"',
        'JOBS_CHANNEL = "dl_jobs"',
    ]
    for source in prose:
        assert not offences(source), source
