"""The benchmark byte-compiles crawlfleet first: a checkout edited since its install (or
run under PYTHONDONTWRITEBYTECODE) would have every node it starts compile the package
again."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import crawlfleet.benchmark.vanilla as module
from crawlfleet.cli.bench import _byte_compile


def test_a_module_without_fresh_bytecode_gets_it() -> None:
    source = Path(module.__file__ or "")
    cached = Path(importlib.util.cache_from_source(str(source)))
    cached.unlink(missing_ok=True)
    _byte_compile()
    assert cached.is_file()
    # the bytecode names the source's modification time: fresh, read by the next import
    assert int.from_bytes(cached.read_bytes()[8:12], "little") == int(source.stat().st_mtime)
