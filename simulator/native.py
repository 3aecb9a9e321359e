"""The compiled engine: which build of the engine's hot modules a process runs, and loading it.

An install compiles the engine's hot modules (``setup.py``'s ``COMPILED``: the engine loop, the
schedulers, the KV cache, the cost model) with mypyc into ``simulator/_compiled/``, with a manifest
of the SHA-256 of each source it was built from. :func:`install` (run when ``simulator`` is
imported) puts a finder first on ``sys.meta_path`` that loads those extensions in place of the
same-named modules, all of them or none:

* none when ``LLMPLAN_PURE_PYTHON=1`` is set (the pure-Python engine, e.g. to compare the two);
* none when there is no manifest (an install without a C compiler, or a source checkout that was
  never installed);
* none, with a warning, when a source no longer matches its manifest entry (a module was edited
  after the install: the stale extension would run the old code) or the extensions were built for
  another Python.

Both builds run the same source and give the same runs bit for bit (``tests/test_native.py``
compares digests of 57 runs); the compiled one is about twice as fast (``docs/speed.md``).
:func:`engine_build` says which one the process runs and why.
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader, ModuleSpec
from typing import Any

# Only light imports here: every ``import simulator`` runs this module (``llmplan --help`` too).
PURE_ENV = "LLMPLAN_PURE_PYTHON"
"""Set (to anything but ``0``/``false``/``no``) to run the pure-Python engine."""
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
COMPILED_DIR = os.path.join(PACKAGE_DIR, "_compiled")
MANIFEST = os.path.join(COMPILED_DIR, "manifest.json")


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


class _CompiledEngineFinder:
    """A ``sys.meta_path`` finder of the manifest's modules among the compiled extensions; the
    first look-up checks the manifest against the sources (so that a process that never imports the
    engine never reads them) and decides for all of them."""

    def __init__(self, manifest: dict[str, Any], compiled_dir: str = COMPILED_DIR,
                 source_root: str = os.path.dirname(PACKAGE_DIR)) -> None:
        self.manifest = manifest
        self.compiled_dir, self.source_root = compiled_dir, source_root
        self.modules: dict[str, dict[str, str]] = manifest.get("modules", {})
        self.usable: bool | None = None
        self.reason = "compiled (mypyc)"

    def _check(self) -> bool:
        if self.manifest.get("python") != sys.implementation.cache_tag:
            return self._refuse(f"the compiled engine was built for {self.manifest.get('python')}, "
                                f"not {sys.implementation.cache_tag}", warn=True)
        group = self.manifest.get("group", "")
        if not any(os.path.isfile(os.path.join(self.compiled_dir, group.rsplit(".", 1)[-1] + s))
                   for s in EXTENSION_SUFFIXES):
            return self._refuse("the compiled engine's shared library is missing", warn=True)
        for module, entry in self.modules.items():
            if not os.path.isfile(os.path.join(self.compiled_dir, entry["file"])):
                return self._refuse(f"the compiled {module} is missing", warn=True)
            source = os.path.join(self.source_root, entry["source"])
            if os.path.isfile(source) and _sha256(source) != entry["sha256"]:
                return self._refuse(f"{entry['source']} changed after the engine was compiled "
                                    "(rebuild: `make`, or `pip install -e .`)", warn=True)
        return True

    def _refuse(self, reason: str, warn: bool) -> bool:
        self.reason = f"pure Python: {reason}"
        if warn:
            # One line on stderr (a warning at a source line would print that line of this module too).
            warnings.warn_explicit(f"llmplan runs its engine as pure Python (slower): {reason}", RuntimeWarning,
                                   filename="llmplan", lineno=0, module="simulator.native")
        return False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        entry = self.modules.get(fullname)
        if entry is None:
            return None
        if self.usable is None:
            self.usable = self._check()
        if not self.usable:
            return None
        origin = os.path.join(self.compiled_dir, entry["file"])
        return ModuleSpec(fullname, ExtensionFileLoader(fullname, origin), origin=origin)


def _sha256(path: str) -> str:
    import hashlib

    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


_state: dict[str, Any] = {"finder": None, "reason": None}
"""This process's finder, or why there is none (the one piece of module state: imports are per process)."""


def install() -> None:
    """Put the compiled engine's finder first on ``sys.meta_path`` (once per process), unless
    ``LLMPLAN_PURE_PYTHON`` is set or no compiled engine was installed."""
    if _state["finder"] is not None or _state["reason"] is not None:
        return
    if _flag(PURE_ENV):
        _state["reason"] = f"pure Python: {PURE_ENV} is set"
        return
    try:
        with open(MANIFEST, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        _state["reason"] = "pure Python: no compiled engine was installed (no C compiler, or never built)"
        return
    except (OSError, ValueError) as exc:
        _state["reason"] = f"pure Python: unreadable {os.path.basename(MANIFEST)}: {exc}"
        return
    finder = _CompiledEngineFinder(manifest)
    sys.meta_path.insert(0, finder)
    _state["finder"] = finder


def engine_build() -> str:
    """Which engine this process runs: ``compiled (mypyc)`` or ``pure Python: <why>``."""
    finder = _state["finder"]
    if finder is None:
        return _state["reason"] or "pure Python: simulator.native.install() was not called"
    if finder.usable is None:     # nothing imported the engine yet: decide now, as its import would
        finder.usable = finder._check()
    return finder.reason


def is_compiled(module: Any) -> bool:
    """Whether an imported module is a compiled extension (not its Python source)."""
    return str(getattr(module, "__file__", "")).endswith(tuple(EXTENSION_SUFFIXES))
