"""Every file the package reads at run time (SQL statements, migrations) is declared as package
data, so `pip install .` (not only an editable install, which reads the source tree) ships it. A
new `queries/<concern>/` folder once went missing from a non-editable install this way."""

from __future__ import annotations

import glob
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "dataloader"


def declared() -> set[Path]:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["dataloader"]
    # setuptools expands package-data patterns with glob(recursive=True) relative to the package
    return {Path(p) for pattern in patterns for p in glob.glob(pattern, root_dir=PACKAGE, recursive=True)}


def test_every_sql_file_and_migration_is_package_data():
    needed = {p.relative_to(PACKAGE) for p in PACKAGE.glob("storage/queries/**/*.sql")}
    needed |= {p.relative_to(PACKAGE) for p in PACKAGE.glob("storage/migrations/versions/*.py")}
    assert len(needed) > 60
    assert not needed - declared(), f"not shipped by a non-editable install: {sorted(needed - declared())}"


def test_every_console_template_and_asset_is_package_data():
    """The console (issue 20) ships every template and asset (htmx, uPlot, CSS, their licenses)
    in the wheel: nothing comes from a CDN, so a missing file is a broken page."""
    needed = {p.relative_to(PACKAGE) for p in PACKAGE.glob("ui/templates/*") if p.is_file()}
    needed |= {p.relative_to(PACKAGE) for p in PACKAGE.glob("ui/static/**/*") if p.is_file()}
    assert {Path("ui/static/vendor/htmx.min.js"), Path("ui/static/vendor/uPlot.LICENSE")} <= needed
    assert not needed - declared(), f"not shipped by a non-editable install: {sorted(needed - declared())}"
