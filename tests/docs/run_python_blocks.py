"""Run python blocks of the docs as scripts, one after the other in this one process (an interpreter
and dataloader's import per block would cost seconds each): `python run_python_blocks.py blocks.json
results.json`, in the directory the scripts may write to. Each block runs with fresh globals
(`__name__ == "__main__"`), and what it registered (pipelines, processors, observer kinds, schedules,
maintenance services) is forgotten afterwards, so two blocks may define the same task as two
separate scripts would. A block that opens with `# name.py` is also written there, for a later
block to import (`DL_PIPELINE_MODULES=myjobs`, `from myjobs import ...`); a test module
(`# tests/test_x.py`) is then run by pytest, as its reader would."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path


def _registries() -> list[dict | list]:
    from dataloader.maintenance import registry as services
    from dataloader.observers.registry import observers
    from dataloader.processes.registry import processors
    from dataloader.schedules import declare
    from dataloader.workers.pipelines.registry import registry
    from dataloader.workflows.registry import workflows

    return [registry._pipelines, processors._processors, observers._kinds, declare._DECLARED, services._FACTORIES,
            workflows._workflows]


def _forget_local_modules() -> None:
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(Path.cwd())):
            del sys.modules[name]


def _restore(saved: list[dict | list]) -> None:
    for kind, before in zip(_registries(), saved, strict=True):
        kind.clear()
        kind.update(before) if isinstance(kind, dict) else kind.extend(before)


def _pytest(path: str) -> dict:
    import pytest

    said = io.StringIO()
    # only the plugin the test asks for (pytest-asyncio): the other installed ones take seconds to load
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    with contextlib.redirect_stdout(said):
        code = pytest.main([path, "-q", "-p", "no:cacheprovider", "-p", "pytest_asyncio.plugin",
                            "-o", "asyncio_mode=auto"])
    return {"ok": code == 0, "error": said.getvalue()[-5000:]}


def main() -> None:
    blocks = json.loads(Path(sys.argv[1]).read_text())
    results = {}
    sys.path.insert(0, str(Path.cwd()))
    saved = [kind.copy() for kind in _registries()]
    for block in blocks:
        named = re.match(r"#\s*([\w/.-]+\.py)\b", block["code"])
        if named:
            target = Path.cwd() / named.group(1)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block["code"])
        started = time.monotonic()
        before_block = [kind.copy() for kind in _registries()]
        try:
            exec(compile(block["code"], block["name"], "exec"), {"__name__": "__main__", "__file__": block["name"]})
            results[block["name"]] = {"ok": True}
            if named and Path(named.group(1)).name.startswith("test_"):
                # pytest imports the file and what it imports afresh: what the exec above registered
                # would be a second registration of each name (a workflow refuses that)
                _restore(before_block)
                _forget_local_modules()
                results[block["name"]] = _pytest(named.group(1))
        except BaseException:  # SystemExit included: a script that exits is a failure here
            results[block["name"]] = {"ok": False, "error": traceback.format_exc()}
        _forget_local_modules()  # the next block imports its own files afresh
        results[block["name"]]["sec"] = round(time.monotonic() - started, 2)
        _restore(saved)
    Path(sys.argv[2]).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
