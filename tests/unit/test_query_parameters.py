"""Every query gets exactly the parameters it uses, checked without a database: for each
`storage/queries/**/*.sql`, the `$n` placeholders must be 1..n with none skipped, and every call
site must pass n arguments (a `:name` statement run through SQLAlchemy's `text()` must get exactly
those names). Call sites are found by parsing the package: a call with a `sql("name")` (or
`claim_sql(...)`, or `text(sql("name"))`, or `in_epoch(...)` of either) argument passes the
positional arguments after it, and a helper that forwards `sql(<its parameter>)` with `*args`
makes its own callers call sites. A mismatch would otherwise only show as a driver error at run
time, on the path that runs it."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import dataloader

PACKAGE_ROOT = Path(dataloader.__file__).parent
QUERIES = PACKAGE_ROOT / "storage" / "queries"

_COMMENT = re.compile(r"--[^\n]*")
_LITERAL = re.compile(r"'(?:[^']|'')*'")
_POSITIONAL = re.compile(r"\$(\d+)")
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@dataclass(frozen=True)
class CallSite:
    where: str
    query: str
    positional: int | None  # None: arguments that cannot be counted
    named: frozenset[str] | None = None  # text() calls: the bind names passed
    built_at: str | None = None  # where its parameters are put together (None: one value or none)


def placeholders(text: str) -> tuple[set[int], set[str]]:
    """The `$n` numbers and `:name` binds a statement uses (comments and string literals aside)."""
    body = _LITERAL.sub("''", _COMMENT.sub("", text))
    return {int(n) for n in _POSITIONAL.findall(body)}, set(_NAMED.findall(body))


def query_files(root: Path = QUERIES) -> dict[str, str]:
    return {p.relative_to(root).with_suffix("").as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(root.rglob("*.sql"))}


def _func_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


CLAIM_BUILDERS = {"sql", "claim_sql", "claim_limited_sql", "fair_claim_sql", "step_claim_sql", "text", "in_epoch"}


def _query_of(node: ast.expr) -> str | None:
    """The query name an argument loads: sql("name"), claim_sql(n), text(sql("name"))."""
    if not isinstance(node, ast.Call):
        return None
    name = _func_name(node.func)
    if name == "sql" and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    if name == "claim_sql":
        return "claim_jobs"
    if name == "claim_limited_sql":
        return "claim_limited_jobs"
    if name == "fair_claim_sql":
        return "claim_jobs_fair"
    if name == "step_claim_sql":
        return "step_succeeded_claim"
    if name in ("text", "in_epoch") and node.args:  # in_epoch: the same statement, re-prepared (plan_epoch.py)
        return _query_of(node.args[0])
    return None


def _width(node: ast.expr, assigned: dict[str, ast.expr], depth: int = 0) -> int | None:
    """How many values a starred expression (or a parameter sequence) spreads, when the code says
    so literally: a tuple/list display, a name bound to one, or columns transposed with zip(*rows)."""
    if depth > 5:
        return None
    if isinstance(node, ast.Tuple | ast.List):
        total = 0
        for element in node.elts:
            width = _width(element.value, assigned, depth + 1) if isinstance(element, ast.Starred) else 1
            if width is None:
                return None
            total += width
        return total
    if isinstance(node, ast.Name) and node.id in assigned:
        return _width(assigned[node.id], assigned, depth + 1)
    if isinstance(node, ast.Call) and f"{_func_name(node.func)}()" in assigned:  # a helper returning a tuple
        return _width(assigned[f"{_func_name(node.func)}()"], assigned, depth + 1)
    if isinstance(node, ast.Call) and _func_name(node.func) in {"list", "tuple", "zip"} and len(node.args) == 1:
        return _width(node.args[0], assigned, depth + 1)
    if isinstance(node, ast.Starred):
        return _width(node.value, assigned, depth + 1)
    if isinstance(node, ast.ListComp | ast.GeneratorExp):
        source = node.generators[0].iter
        if (isinstance(source, ast.Call) and _func_name(source.func) == "zip" and len(source.args) == 1
                and isinstance(source.args[0], ast.Starred)):
            return _width(source.args[0], assigned, depth + 1)  # one item per column of the rows
        return _width(node.elt, assigned, depth + 1)  # rows, to be transposed by zip(*...)
    return None


def _is_sequence(node: ast.expr, assigned: dict[str, ast.expr]) -> bool:
    """A list/tuple display (or a name bound to one): the DB-API style of passing parameters."""
    if isinstance(node, ast.Name) and node.id in assigned:
        node = assigned[node.id]
    return isinstance(node, ast.Tuple | ast.List)


def _count(args: list[ast.expr], assigned: dict[str, ast.expr]) -> int | None:
    """Arguments a call passes after the query: asyncpg style (one per parameter, `*spread`
    allowed), or DB-API style (one list/tuple display holding them all, as sync.py's runner takes)."""
    if len(args) == 1 and _is_sequence(args[0], assigned):
        return _width(args[0], assigned)
    total = 0
    for arg in args:
        if isinstance(arg, ast.Starred):
            width = _width(arg.value, assigned)
            if width is None:
                return None
            total += width
        else:
            total += 1
    return total


def _built_at(args: list[ast.expr], assigned: dict[str, ast.expr], rel: str, where: str) -> str | None:
    """Where a call's parameters are put together: the line that binds the one name it passes
    (`*params`, or a DB-API sequence), else the call itself when it lists two or more."""
    if len(args) == 1:
        arg = args[0].value if isinstance(args[0], ast.Starred) else args[0]
        if isinstance(arg, ast.Name) and arg.id in assigned:
            return f"{rel}:{assigned[arg.id].lineno}"
        if isinstance(arg, ast.Call) and f"{_func_name(arg.func)}()" in assigned:
            return f"{rel}:{assigned[f'{_func_name(arg.func)}()'].lineno}"
        return where if isinstance(args[0], ast.Starred) else None
    return where if len(args) >= 2 else None


def _assignments(func: ast.AST) -> dict[str, ast.expr]:
    assigned: dict[str, ast.expr] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned[node.targets[0].id] = node.value
    return assigned


def _tuple_helpers(tree: ast.Module) -> dict[str, ast.expr]:
    """Functions of the module that end by returning a tuple display (a statement's parameters
    built in one place): "name()" -> that tuple, so `*name(...)` is counted like `*params`."""
    found: dict[str, ast.expr] = {}
    for func in ast.walk(tree):
        if (isinstance(func, ast.FunctionDef) and func.body and isinstance(func.body[-1], ast.Return)
                and isinstance(func.body[-1].value, ast.Tuple)):
            found[f"{func.name}()"] = func.body[-1].value
    return found


def _forwarders(tree: ast.Module) -> dict[str, int]:
    """Helpers `def f(self, conn, query, *args): ... sql(query), *args ...`: name -> index of the
    query among the arguments a caller passes (self/cls not counted)."""
    found: dict[str, int] = {}
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) or func.args.vararg is None:
            continue
        params = [a.arg for a in func.args.posonlyargs + func.args.args]
        if params and params[0] in {"self", "cls"}:
            params = params[1:]
        for call in ast.walk(func):
            if not isinstance(call, ast.Call):
                continue
            for i, arg in enumerate(call.args):
                if (isinstance(arg, ast.Call) and _func_name(arg.func) == "sql" and arg.args
                        and isinstance(arg.args[0], ast.Name) and arg.args[0].id in params
                        and call.args[i + 1:] and isinstance(call.args[-1], ast.Starred)
                        and isinstance(call.args[-1].value, ast.Name)
                        and call.args[-1].value.id == func.args.vararg.arg):
                    found[func.name] = params.index(arg.args[0].id)
    return found


def call_sites(root: Path = PACKAGE_ROOT) -> list[CallSite]:
    trees = {p: ast.parse(p.read_text(encoding="utf-8"), filename=str(p)) for p in sorted(root.rglob("*.py"))}
    forwarders: dict[str, int] = {}
    for tree in trees.values():
        forwarders.update(_forwarders(tree))
    sites: list[CallSite] = []
    for path, tree in trees.items():
        rel = path.relative_to(root.parent).as_posix()
        functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        helpers = _tuple_helpers(tree)
        scopes = [(f, {**helpers, **_assignments(f)}) for f in functions] + [(tree, helpers)]
        seen: set[int] = set()
        for scope, assigned in scopes:
            for call in ast.walk(scope):
                if (not isinstance(call, ast.Call) or id(call) in seen
                        or _func_name(call.func) in CLAIM_BUILDERS):
                    continue
                where = f"{rel}:{call.lineno}"
                for i, arg in enumerate(call.args):
                    query = _query_of(arg)
                    if query is None:
                        continue
                    seen.add(id(call))
                    rest = call.args[i + 1:]
                    if isinstance(arg, ast.Call) and _func_name(arg.func) == "text":
                        named: frozenset[str] | None = frozenset()
                        if rest:
                            mapping = rest[0]
                            named = (frozenset(k.value for k in mapping.keys if isinstance(k, ast.Constant))
                                     if isinstance(mapping, ast.Dict) and all(
                                         isinstance(k, ast.Constant) for k in mapping.keys) else None)
                        sites.append(CallSite(where, query, 0, named))
                    else:
                        sites.append(CallSite(where, query, _count(rest, assigned),
                                              built_at=_built_at(rest, assigned, rel, where)))
                index = forwarders.get(_func_name(call.func) or "")
                if index is not None and len(call.args) > index:
                    arg = call.args[index]
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        seen.add(id(call))
                        rest = call.args[index + 1:]
                        sites.append(CallSite(where, arg.value, _count(rest, assigned),
                                              built_at=_built_at(rest, assigned, rel, where)))
    return sites


_INCLUDE = re.compile(r"^-- @include ([a-z0-9_/]+)$", re.MULTILINE)


def expanded(queries: dict[str, str], name: str) -> str:
    """A query's text with its `-- @include` lines replaced, as `sql()` loads it."""
    return _INCLUDE.sub(lambda m: expanded(queries, m.group(1)), queries[name])


def mismatches(queries: dict[str, str], sites: list[CallSite]) -> list[str]:
    problems: list[str] = []
    by_query: dict[str, list[CallSite]] = {}
    for site in sites:
        by_query.setdefault(site.query, []).append(site)
        if site.query not in queries:
            problems.append(f"{site.where}: no query file {site.query}.sql")
    # a part included by a called query, or by a part of one, is called with it (its parameters
    # counted there)
    included: set[str] = set()
    reached = [name for name in queries if by_query.get(name)]
    while reached:
        parts = {part for name in reached for part in _INCLUDE.findall(queries.get(name, ""))} - included
        included |= parts
        reached = list(parts)
    for name in queries:
        text = expanded(queries, name)
        numbers, names = placeholders(text)
        highest = max(numbers, default=0)
        if numbers != set(range(1, highest + 1)):
            problems.append(f"{name}.sql: uses {sorted(numbers)}, "
                            f"not all of $1..${highest} (missing {sorted(set(range(1, highest + 1)) - numbers)})")
        if not by_query.get(name) and name not in included:
            problems.append(f"{name}.sql: no call site found (unused, or called in a way this test cannot see)")
        for site in by_query.get(name, []):
            if site.named is not None or (names and not numbers):
                if site.named != frozenset(names):
                    problems.append(f"{site.where}: {name}.sql binds {sorted(names)}, the call passes "
                                    f"{'uncountable names' if site.named is None else sorted(site.named)}")
            elif site.positional is None:
                problems.append(f"{site.where}: {name}.sql takes {highest} arguments; the call's cannot be "
                                "counted (spread a literal tuple, or name the arguments)")
            elif site.positional != highest:
                problems.append(f"{site.where}: {name}.sql takes {highest} arguments, the call passes "
                                f"{site.positional}")
    return problems


_RANGE = re.compile(r"\$(\d+)\s*(?:\.\.|/)\s*\$(\d+)")
_SAME_AS = re.compile(r"\bas (?:in )?([a-z0-9_]+(?:/[a-z0-9_]+)?)\.sql")


def header(text: str) -> str:
    """A statement's header: its leading `--` lines."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return "\n".join(lines)


def header_names(queries: dict[str, str], name: str, seen: frozenset[str] = frozenset()) -> set[int]:
    """The `$n` a statement's header names: one by one, as a range ($1..$12, $2/$3), or through
    another statement's header it points to ("as insert_job.sql", "Parameters as in X.sql")."""
    text = header(queries[name])
    named = {int(n) for n in _POSITIONAL.findall(text)}
    for low, high in _RANGE.findall(text):
        named |= set(range(int(low), int(high) + 1))
    folder = name.rpartition("/")[0]
    for other in _SAME_AS.findall(text):
        if other not in queries and folder:
            other = f"{folder}/{other}"  # a statement of the same folder
        if other in queries and other not in seen:
            named |= header_names(queries, other, seen | {name})
    return named


def header_problems(queries: dict[str, str]) -> list[str]:
    problems = []
    for name in queries:
        numbers, _ = placeholders(expanded(queries, name))
        missing = numbers - header_names(queries, name)
        if missing:
            problems.append(f"{name}.sql: its header does not name {', '.join(f'${n}' for n in sorted(missing))}")
    return problems


def builder_problems(sites: list[CallSite]) -> list[str]:
    """A statement's parameters are put together in one place: two call sites that each list the
    same statement's parameters would drift apart (one of them forgets the new $n)."""
    builders: dict[str, set[str]] = {}
    for site in sites:
        if site.built_at is not None:
            builders.setdefault(site.query, set()).add(site.built_at)
    return [f"{query}.sql: its parameters are put together in {len(places)} places ({', '.join(sorted(places))}); "
            "build them once (one function, or one tuple spread at each call)"
            for query, places in sorted(builders.items()) if len(places) > 1]


def test_every_header_names_the_parameters_its_statement_uses() -> None:
    problems = header_problems(query_files())
    assert not problems, "\n".join(problems)


def test_each_statements_parameters_are_built_in_one_place() -> None:
    problems = builder_problems(call_sites())
    assert not problems, "\n".join(problems)


def test_the_header_and_builder_checks_can_fail(tmp_path: Path) -> None:
    queries = {
        "named": "-- Jobs of queue $1 after $2/$3, at most $4.\nSELECT $1, $2, $3, $4;",
        "ranged": "-- The filter ($1..$3).\nSELECT $1, $2, $3;",
        "same": "-- Parameters as named.sql's.\nSELECT $1, $2, $3, $4;",
        "silent": "-- Something about $1.\nSELECT $1, $2;",
    }
    assert header_problems(queries) == ["silent.sql: its header does not name $2"]
    pkg = tmp_path / "dataloader"
    pkg.mkdir()
    (pkg / "callers.py").write_text('''
async def one(conn, a, b):
    params = (a, b)
    await conn.fetch(sql("once"), *params)
    await conn.fetchrow(sql("once"), *params)
    await conn.fetch(sql("twice"), a, b)

async def two(conn, a, b):
    await conn.fetch(sql("twice"), a, b)
    await conn.fetch(sql("single"), a)
    await conn.fetch(sql("single"), b)
    await conn.fetch(sql("helped"), *_helped(a))
    await conn.fetch(sql("helped_too"), *_helped(b))

def _helped(a):
    return (a, a)
''')
    sites = call_sites(pkg)
    assert {(s.query, s.positional) for s in sites if s.query.startswith("helped")} == {("helped", 2),
                                                                                      ("helped_too", 2)}
    problems = builder_problems(sites)
    assert len(problems) == 1 and problems[0].startswith("twice.sql: its parameters are put together in 2 places"), \
        problems


def test_every_query_gets_the_parameters_it_uses() -> None:
    queries = query_files()
    sites = call_sites()
    assert {"claim_jobs", "finish_jobs", "heartbeat_jobs"} <= {s.query for s in sites}, \
        "the parse did not find the engine's call sites"
    problems = mismatches(queries, sites)
    assert not problems, "queries and their callers disagree:\n" + "\n".join(problems)


def test_the_check_catches_each_kind_of_mismatch(tmp_path: Path) -> None:
    """The guard can fail: a skipped $n, a call with one argument too many or too few, a text()
    call with the wrong bind name, a query nobody calls and a call of a missing file."""
    queries = {
        "two": "-- $9 in a comment does not count\nSELECT $1, '$7', $2;",
        "gap": "SELECT $1, $3;",
        "named": "SELECT pg_advisory_lock(:lock_id)::bigint;",
        "forwarded": "SELECT $1;",
        "spread": "SELECT $1, $2, $3;",
        "orphan": "SELECT 1;",
    }
    pkg = tmp_path / "dataloader"
    pkg.mkdir()
    (pkg / "callers.py").write_text('''
async def calls(conn, caller_connection, runner, a, b, rows):
    await conn.fetch(sql("two"), a, b)
    await conn.fetch(sql("two"), a)
    await caller_connection.fetch(conn, sql("two"), a, b, b)
    await conn.fetchval(sql("gap"), a, b, a)
    conn.execute(text(sql("named")), {"id": 1})
    params = (a, b, a)
    cols = list(zip(*((r.x, r.y) for r in rows)))
    await conn.fetch(sql("spread"), *params)
    await conn.fetch(sql("spread"), *cols, a)
    await conn.fetch(sql("spread"), *rows)
    await conn.fetch(sql("missing"))
    runner.fetch(sql("spread"), [a, *params[:1], b])
    runner.fetch(sql("spread"), [*[list(c) for c in zip(*((r.x, r.y) for r in rows))], a])

class Probe:
    async def _fetchval(self, conn, query, *args):
        return await conn.fetchval(sql(query), *args)

    async def go(self, conn):
        await self._fetchval(conn, "forwarded", 1, 2)
''')
    problems = mismatches(queries, call_sites(pkg))
    text = "\n".join(problems)
    expected = [
        "callers.py:4: two.sql takes 2 arguments, the call passes 1",
        "callers.py:5: two.sql takes 2 arguments, the call passes 3",
        "gap.sql: uses [1, 3], not all of $1..$3 (missing [2])",
        "callers.py:7: named.sql binds ['lock_id'], the call passes ['id']",
        "callers.py:12: spread.sql takes 3 arguments; the call's cannot be counted",
        "callers.py:13: no query file missing.sql",
        "callers.py:14: spread.sql takes 3 arguments; the call's cannot be counted",
        "callers.py:22: forwarded.sql takes 1 arguments, the call passes 2",
        "orphan.sql: no call site found",
    ]
    for line in expected:
        assert line in text, f"{line!r} not reported in:\n{text}"
    for fine in (3, 10, 11, 15):
        assert f"callers.py:{fine}:" not in text, text
    assert len(problems) == len(expected), text
