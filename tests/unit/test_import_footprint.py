"""What a worker does not load: Alembic and SQLAlchemy (~30 MB of resident memory together) are
imported only to migrate or for `app.sessionmaker`, and FastAPI only by `serve`. A worker starts
with one asyncpg query for the schema revision; the head revision is read from the migration files.
Each check runs in a fresh interpreter, since this test process has imported everything already."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dataloader.storage import migrate

HEAVY = ("alembic", "sqlalchemy", "fastapi")

REPORT = "import sys, json; print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))"


def loaded_after(code: str, env: dict[str, str] | None = None) -> list[str]:
    script = f"{code}\n{REPORT.format(heavy=HEAVY)}"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.process  # a fresh interpreter
def test_import_dataloader_loads_no_migration_tool_orm_or_web_framework():
    assert loaded_after("import dataloader") == []


def test_head_revision_read_from_the_files_is_alembics():
    from alembic.script import ScriptDirectory

    assert migrate.head_revision() == ScriptDirectory.from_config(migrate.alembic_config()).get_current_head()
