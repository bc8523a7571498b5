"""Build a crawlfleet bundle: one zipapp file holding crawlfleet, every package it
needs as installed here (native extensions included), and optionally a Scrapy
project. It runs with a Python of the same version and platform as this one, with
nothing else installed (see :mod:`crawlfleet.bundle.bootstrap`)."""

from __future__ import annotations

import compileall
import configparser
import hashlib
import importlib.metadata as metadata
import json
import py_compile
import shutil
import sys
import sysconfig
import tempfile
import zipapp
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import crawlfleet
from crawlfleet.bundle import bootstrap
from crawlfleet.exceptions import ConfigError

__all__ = ["Bundle", "build_bundle", "distributions"]

#: Files of an installation that a bundle leaves out: an editable install's hooks (the
#: package itself is copied from its sources), path hooks (.pth: the bundle's packages
#: are put on sys.path by its bootstrap) and compiled bytecode (compiled anew).
_SKIPPED_SUFFIXES = (".pyc", ".pth")
_SKIPPED_PREFIXES = ("__editable__",)


@dataclass(frozen=True)
class Bundle:
    path: Path
    id: str
    distributions: list[str]
    size_bytes: int
    settings_module: str | None


def distributions(root: str = "crawlfleet") -> list[metadata.Distribution]:
    """*root* and every distribution it requires, transitively, as installed here
    (extras followed where a requirement names them; requirements whose markers do
    not hold here left out)."""
    found: dict[str, metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = [(root, "")]
    while todo:
        name, extra = todo.pop()
        key = canonicalize_name(name)
        if (key, extra) in done:
            continue
        done.add((key, extra))
        try:
            dist = found.get(key) or metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise ConfigError(
                f"{name} is required but not installed here: install it, then bundle again"
            ) from None
        found[key] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": extra}):
                continue
            if extra and (req.marker is None or "extra" not in str(req.marker)):
                continue  # a base requirement: followed with extra ""
            todo.append((req.name, ""))
            todo += [(req.name, e) for e in req.extras]
    return sorted(found.values(), key=lambda d: canonicalize_name(d.metadata["Name"]))


def _files(dist: metadata.Distribution) -> Iterator[tuple[Path, str]]:
    """(file on disk, its path in site-packages) of an installed distribution."""
    for rel in dist.files or []:
        parts = Path(str(rel)).parts
        if not parts or parts[0] == ".." or "__pycache__" in parts:
            continue
        if rel.name.endswith(_SKIPPED_SUFFIXES) or rel.name.startswith(_SKIPPED_PREFIXES):
            continue
        source = Path(str(dist.locate_file(rel)))
        if source.is_file():
            yield source, "/".join(parts)


def _package_sources(module_dir: Path) -> Iterator[tuple[Path, str]]:
    """Every file of the package at *module_dir* (crawlfleet itself, installed editable
    or not: its Lua scripts, dashboard and migrations included)."""
    for source in sorted(module_dir.rglob("*")):
        if source.is_file() and "__pycache__" not in source.parts:
            rel = source.relative_to(module_dir.parent)
            yield source, "/".join(rel.parts)


def _project(directory: Path) -> tuple[str, list[tuple[Path, str]]]:
    """(settings module, files) of the Scrapy project in *directory*: its scrapy.cfg and
    the package of its settings module, nothing else (not the bundle being written, not
    a config file with passwords beside it, not a virtualenv)."""
    cfg = directory / "scrapy.cfg"
    parser = configparser.ConfigParser()
    if not parser.read(cfg):
        raise ConfigError(f"--project {directory}: no scrapy.cfg there")
    module = parser.get("settings", "default", fallback="")
    if not module:
        raise ConfigError(f"{cfg}: no [settings] default = <module>")
    package = directory / module.split(".")[0]
    if not (package / "__init__.py").is_file():
        raise ConfigError(f"{cfg}: the settings module {module} is not in a package at {package}")
    files = [(cfg, "scrapy.cfg")]
    for source in sorted(package.rglob("*")):
        rel = source.relative_to(directory)
        hidden = any(p.startswith(".") or p == "__pycache__" for p in rel.parts)
        if source.is_file() and not hidden:
            files.append((source, "/".join(rel.parts)))
    return module, files


def build_bundle(
    output: Path,
    *,
    project: Path | None = None,
    interpreter: str = "/usr/bin/env python3",
) -> Bundle:
    """Write the bundle to *output* (see the module docstring). *project*: a Scrapy
    project directory: its scrapy.cfg and its settings module's package go in."""
    dists = distributions()
    staging = Path(tempfile.mkdtemp(prefix="crawlfleet-bundle-"))
    digest = hashlib.sha256()
    try:
        copied: set[str] = set()

        def add(source: Path, target: str) -> None:
            if target in copied:
                return
            copied.add(target)
            dest = staging / target
            dest.parent.mkdir(parents=True, exist_ok=True)
            data = source.read_bytes()
            dest.write_bytes(data)
            shutil.copymode(source, dest)
            digest.update(target.encode() + b"\0" + data)

        own = Path(crawlfleet.__file__).resolve().parent
        for source, rel in _package_sources(own):
            add(source, f"site/{rel}")
        for dist in dists:
            for source, rel in _files(dist):
                if not rel.startswith("crawlfleet/"):
                    add(source, f"site/{rel}")
        settings_module = None
        if project is not None:
            settings_module, files = _project(project.resolve())
            for source, rel in files:
                add(source, f"project/{rel}")
        # bytecode now, valid whatever the files' times once extracted: a node starts
        # as fast as an installed one, also where it cannot write __pycache__
        compileall.compile_dir(
            str(staging / "site"),
            quiet=2,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        bundle_id = digest.hexdigest()[:16]
        names = [f"{d.metadata['Name']}=={d.version}" for d in dists]
        manifest = {
            "id": bundle_id,
            "python": list(sys.version_info[:2]),
            "platform": sysconfig.get_platform(),
            "crawlfleet": metadata.version("crawlfleet"),
            "distributions": names,
            "settings_module": settings_module,
        }
        (staging / bootstrap.MANIFEST).write_text(json.dumps(manifest, indent=1))
        shutil.copy2(Path(bootstrap.__file__), staging / "__main__.py")
        output.parent.mkdir(parents=True, exist_ok=True)
        zipapp.create_archive(staging, output, interpreter=interpreter, compressed=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Bundle(output, bundle_id, names, output.stat().st_size, settings_module)
