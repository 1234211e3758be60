"""The run wrote the checkout's bytecode before its workers started (tests/support/bytecode.py), so
no process the suite starts compiles src/ again, whatever PYTHONDONTWRITEBYTECODE says."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import dataloader.app
import dataloader.cli.service
import tests.support.pipelines


def test_the_modules_every_started_process_imports_have_their_bytecode() -> None:
    for module in (dataloader.app, dataloader.cli.service, tests.support.pipelines):
        cached = Path(importlib.util.cache_from_source(module.__file__))
        assert cached.is_file(), f"{module.__name__}: no {cached}"
        assert cached.stat().st_mtime_ns >= Path(module.__file__).stat().st_mtime_ns - 10**9, cached
