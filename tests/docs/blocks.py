"""The fenced code blocks of README.md and docs/*.md, and how each is run (tests/docs/test_docs_run.py).

A block's info string says what it is: its language, then words that change how it is run —
`fragment` (a piece of a larger program: a python fragment is compiled, top-level `await` allowed,
but not run; a shell fragment is not run), `output` (what a command prints or a log line: JSON and
YAML output is parsed). `text` blocks (trees, diagrams, reports) are not code. Everything else runs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = frozenset({"python", "bash", "sh", "console", "json", "yaml", "ini", "text"})
TAGS = frozenset({"fragment", "output"})
_FENCE = re.compile(r"^(\s*)```(.*)$")


@dataclass(frozen=True)
class Block:
    doc: str  # relative to the repository
    line: int  # of the opening fence
    lang: str
    tags: frozenset[str]
    code: str

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.code.splitlines() if line.strip()), "")

    @property
    def runs(self) -> bool:
        return self.lang != "text" and not self.tags & TAGS


def blocks(docs: list[Path] = DOCS) -> list[Block]:
    found = []
    for path in docs:
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            opening = _FENCE.match(lines[i])
            if opening:
                indent, info = opening.group(1), opening.group(2).split()
                end = i + 1
                while not re.match(r"^\s*```\s*$", lines[end]):
                    end += 1
                code = "\n".join(line[len(indent):] for line in lines[i + 1:end]) + "\n"
                lang = info[0] if info else ""
                found.append(Block(str(path.relative_to(ROOT)), i + 1, lang, frozenset(info[1:]), code))
                i = end
            i += 1
    return found


def shell_commands(block: Block) -> str:
    """The script a shell block runs: a console block's `$ ` lines (and their continuation lines),
    without the output around them; a bash/sh block as it stands."""
    if block.lang != "console":
        return block.code
    script, continued = [], False
    for line in block.code.splitlines():
        if line.startswith("$ "):
            script.append(line[2:])
        elif continued:
            script.append(line)
        else:
            continue
        continued = line.rstrip().endswith("\\")
    return "\n".join(script) + "\n"
