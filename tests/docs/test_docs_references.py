"""What the docs point at exists (issue 34): a link or a mention of a `.md` document resolves to a
file of this repository, and an index cited with its migration ("`ix_dl_jobs_held`, migration
0026") is created by that migration. A reader who follows a reference finds what it names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MIGRATIONS = ROOT / "src" / "dataloader" / "storage" / "migrations" / "versions"
# The names of the repository's markdown files (not the venv's, nor what tests left behind).
MARKDOWN_NAMES = {name for top in ("README.md", "docs", "bench", "deploy", "tests", "src")
                  for name in ([top] if top.endswith(".md") else [p.name for p in (ROOT / top).rglob("*.md")])}


def _doc_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_relative_links_resolve(doc: Path) -> None:
    text = doc.read_text()
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (doc.parent / path).exists():
            missing.append(target)
    assert not missing, f"{_doc_id(doc)} links to files that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_no_document_outside_the_repository_is_cited_as_if_it_were_here(doc: Path) -> None:
    """The design map lives outside the repository (shared/DESIGN.md): a doc may name it only as
    such; what the docs cite from it (the numbered promises) is in docs/architecture.md."""
    bad = []
    for line in doc.read_text().splitlines():
        if "outside this repository" in line:
            continue
        if re.search(r"\bDESIGN\b", line):
            bad.append(line.strip())
            continue
        for name in re.findall(r"\b([\w-]+\.md)\b", line):
            if name not in MARKDOWN_NAMES:
                bad.append(line.strip())
    assert not bad, f"{_doc_id(doc)} cites documents that are not in the repository: {bad}"


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_cited_migration_creates_the_cited_index(doc: Path) -> None:
    wrong = []
    for index, number in re.findall(r"`(ix_\w+)`[^.;`]{0,40}?migration `?(\d{4})", doc.read_text()):
        files = list(MIGRATIONS.glob(f"{number}_*.py"))
        if not files or not any(f"{index} " in f.read_text() or f"{index}\n" in f.read_text() for f in files):
            wrong.append(f"{index} (migration {number})")
    assert not wrong, f"{_doc_id(doc)} cites an index with a migration that does not create it: {wrong}"
