"""The compiled engine (``setup.py``, :mod:`simulator.native`): it is the engine CI runs, it gives
the pure-Python engine's runs bit for bit, and a stale or missing build falls back to pure Python."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from simulator import native

ROOT = Path(__file__).resolve().parents[1]
COMPILED = native.engine_build().startswith("compiled")
needs_compiled = pytest.mark.skipif(not COMPILED, reason=f"this process runs the {native.engine_build()} engine")


def _pure_env() -> dict[str, str]:
    return {**os.environ, native.PURE_ENV: "1", "PYTHONPATH": str(ROOT)}


def _setup_modules() -> list[str]:
    """The modules setup.py compiles (its COMPILED list, read without running setup())."""
    text = (ROOT / "setup.py").read_text()
    block = text[text.index("COMPILED = ["):text.index("]", text.index("COMPILED = ["))]
    return [line.strip().strip('",')[:-3].replace("/", ".") for line in block.splitlines()[1:] if line.strip()]


@pytest.mark.skipif(not os.environ.get("LLMPLAN_REQUIRE_COMPILED"), reason="LLMPLAN_REQUIRE_COMPILED is not set")
def test_the_tests_run_the_compiled_engine_where_it_is_required():
    """``make test`` (and so CI) sets LLMPLAN_REQUIRE_COMPILED: the install compiled every module of
    setup.py's list, and this process runs them."""
    import importlib

    assert native.engine_build() == "compiled (mypyc)"
    for name in _setup_modules():
        assert native.is_compiled(importlib.import_module(name)), name


@needs_compiled
def test_the_manifest_names_the_modules_setup_compiles_with_their_sources():
    manifest = json.loads(Path(native.MANIFEST).read_text())
    assert sorted(manifest["modules"]) == sorted(_setup_modules())
    for entry in manifest["modules"].values():
        digest = hashlib.sha256((ROOT / entry["source"]).read_bytes()).hexdigest()
        assert digest == entry["sha256"], entry["source"]


@needs_compiled
def test_the_compiled_and_pure_python_engines_give_the_same_runs(tmp_path):
    """57 runs (examples, a variant per lever, a random mix: benchmarks/digests.py), digested over
    every request and step column and the summary: the same in both engines, bit for bit."""
    script = ROOT / "benchmarks" / "digests.py"
    subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "pure.json")], env=_pure_env(),
                   check=True, capture_output=True, cwd=ROOT, timeout=600)
    subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "compiled.json")],
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True, capture_output=True, cwd=ROOT,
                   timeout=600)
    pure = json.loads((tmp_path / "pure.json").read_text())
    compiled = json.loads((tmp_path / "compiled.json").read_text())
    assert len(pure) >= 50
    assert not any(v.startswith("error") for v in pure.values())
    assert compiled == pure


@needs_compiled
def test_the_pure_python_tests_pass_in_the_pure_python_engine():
    """The tests that patch the engine's Python code (marker ``pure_python``) are skipped in a
    process that runs the compiled engine; here they run in the pure-Python one."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "pure_python", "-p", "no:cacheprovider",
                          "tests/test_speed.py"], env=_pure_env(), cwd=ROOT, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "skipped" not in out.stdout.splitlines()[-1]


def test_llmplan_pure_python_runs_the_python_sources():
    code = ("import simulator.native as n, simulator.engine.scheduler as s, simulator.engine.replica as r; "
            "print(n.engine_build()); print(s.__file__); print(r.__file__)")
    out = subprocess.run([sys.executable, "-c", code], env=_pure_env(), capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.splitlines()
    assert out[0] == f"pure Python: {native.PURE_ENV} is set"
    assert out[1].endswith("scheduler.py") and out[2].endswith("replica.py")


def _fake_build(tmp_path: Path, source_text: str = "x = 1\n") -> tuple[dict, Path, Path]:
    """A manifest, compiled folder and source tree for one module whose extension files exist."""
    from importlib.machinery import EXTENSION_SUFFIXES

    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text(source_text)
    compiled = tmp_path / "compiled"
    compiled.mkdir()
    (compiled / f"grp__mypyc{EXTENSION_SUFFIXES[0]}").write_bytes(b"")
    (compiled / f"pkg__mod{EXTENSION_SUFFIXES[0]}").write_bytes(b"")
    manifest = {"group": "pkg._compiled.grp__mypyc", "python": sys.implementation.cache_tag,
                "modules": {"pkg.mod": {"file": f"pkg__mod{EXTENSION_SUFFIXES[0]}", "source": "pkg/mod.py",
                                        "sha256": hashlib.sha256(b"x = 1\n").hexdigest()}}}
    return manifest, compiled, src


def test_the_finder_loads_a_build_whose_sources_match(tmp_path):
    manifest, compiled, src = _fake_build(tmp_path)
    finder = native._CompiledEngineFinder(manifest, str(compiled), str(src))
    spec = finder.find_spec("pkg.mod")
    assert spec is not None and spec.origin == str(compiled / manifest["modules"]["pkg.mod"]["file"])
    assert finder.find_spec("pkg.other") is None
    assert finder.reason == "compiled (mypyc)"


def test_an_edited_source_falls_back_to_pure_python_with_a_warning(tmp_path):
    """A module edited after the install: its extension would run the old code, so none of the
    group is loaded (the compiled modules call each other directly: all or none)."""
    manifest, compiled, src = _fake_build(tmp_path, source_text="x = 2\n")
    finder = native._CompiledEngineFinder(manifest, str(compiled), str(src))
    with pytest.warns(RuntimeWarning, match=r"pkg/mod.py changed after the engine was compiled"):
        assert finder.find_spec("pkg.mod") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # decided once: no second warning
        assert finder.find_spec("pkg.mod") is None
    assert finder.reason.startswith("pure Python: pkg/mod.py changed")


@pytest.mark.parametrize("broken", ["other python", "no shared library", "no module file"])
def test_a_build_for_another_python_or_with_missing_files_is_not_loaded(tmp_path, broken):
    manifest, compiled, src = _fake_build(tmp_path)
    if broken == "other python":
        manifest["python"] = "cpython-299"
    elif broken == "no shared library":
        next(compiled.glob("grp__mypyc*")).unlink()
    else:
        next(compiled.glob("pkg__mod*")).unlink()
    finder = native._CompiledEngineFinder(manifest, str(compiled), str(src))
    with pytest.warns(RuntimeWarning, match="pure Python"):
        assert finder.find_spec("pkg.mod") is None
    assert finder.reason.startswith("pure Python")
