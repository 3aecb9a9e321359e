"""Build hook: compile the engine's hot modules with mypyc (the metadata lives in pyproject.toml).

``pip install .`` and ``pip install -e .`` compile the modules in :data:`COMPILED` (the engine
loop, the schedulers, the KV cache, the cost model) into one C extension group, placed in
``simulator/_compiled/`` with a manifest of the sources it was built from; ``simulator.native``
loads them in place of the same-named modules when the sources still match (docs/speed.md,
"The compiled engine"). The Python sources stay the one definition of the engine: the compiled
modules are those sources, translated, and give the same runs bit for bit.

Compiling is optional: without a C compiler (or with ``LLMPLAN_PURE_PYTHON=1`` set at install
time) the install goes on and the engine runs as pure Python, slower. ``LLMPLAN_REQUIRE_COMPILED=1``
makes a failed compile fail the install instead (CI sets it).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: The modules compiled together (one mypyc group: calls between them are native calls).
COMPILED = [
    "simulator/engine/request.py",
    "simulator/engine/kv_cache.py",
    "simulator/workload/block_hashes.py",
    "simulator/engine/prefix_cache.py",
    "simulator/engine/output.py",
    "simulator/engine/request_queue.py",
    "simulator/engine/decode_run.py",
    "simulator/engine/swap.py",
    "simulator/engine/scheduler.py",
    "simulator/engine/policies.py",
    "simulator/engine/disaggregated.py",
    "simulator/engine/speculative.py",
    "simulator/engine/deadlines.py",
    "simulator/engine/pipeline.py",
    "simulator/engine/steplog.py",
    "simulator/engine/replica.py",
    "simulator/engine/data_parallel.py",
    "simulator/cost/base.py",
    "simulator/cost/analytic.py",
    "simulator/cost/piecewise_decode.py",
]
GROUP = "simulator._compiled.engine"
"""The group's shared library is ``simulator._compiled.engine__mypyc``."""
COMPILED_PACKAGE = "simulator._compiled"
MANIFEST = "manifest.json"


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def _module_name(path: str) -> str:
    return path[:-len(".py")].replace("/", ".")


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _stem(module: str) -> str:
    """The file stem of ``module``'s extension in ``simulator/_compiled/``."""
    return module.replace(".", "__")


class build_compiled_engine(build_ext):
    """``build_ext`` that compiles :data:`COMPILED` with mypyc when it can, and goes on without it
    when it cannot (unless ``LLMPLAN_REQUIRE_COMPILED`` is set).

    The extensions are named when the command is set up (cheap: metadata-only steps of a build set
    it up too) and mypyc translates the sources into them only when it runs."""

    def finalize_options(self) -> None:
        self._modules = {_module_name(p): _stem(_module_name(p)) for p in COMPILED}
        self._skipped = False
        if _flag("LLMPLAN_PURE_PYTHON"):
            self._skip("LLMPLAN_PURE_PYTHON is set")
        else:
            self.distribution.ext_modules = [Extension(f"{GROUP}__mypyc", sources=[])] + [
                Extension(f"{COMPILED_PACKAGE}.{stem}", sources=[]) for stem in self._modules.values()]
        super().finalize_options()

    def run(self) -> None:
        if self._skipped:
            return
        try:
            self._translate()
            super().run()
        except (Exception, SystemExit) as exc:      # mypyc's type errors (it exits), no C compiler, ...
            self._fail(exc)
            return
        self._write_manifest()

    def _fail(self, exc: BaseException) -> None:
        if _flag("LLMPLAN_REQUIRE_COMPILED"):
            raise exc
        self._skip(f"{type(exc).__name__}: {exc}")

    def _skip(self, why: str) -> None:
        self.distribution.ext_modules = self.extensions = []
        self._skipped = True
        sys.stderr.write(f"llmplan: the engine is not compiled ({why}); it runs as pure Python, slower\n")

    def _translate(self) -> None:
        """Run mypyc over :data:`COMPILED` and give the named extensions its C sources and flags."""
        from mypyc.build import mypycify  # imported here: only a build that compiles needs mypy

        # Third-party packages are typed Any (no site-packages): the same C code whether or not
        # numpy's stubs are installed where the build runs.
        generated = {}
        for ext in mypycify(["--no-site-packages", "--follow-imports=silent", *COMPILED], opt_level="3",
                            group_name=GROUP):
            name = ext.name if ext.name.endswith("__mypyc") else f"{COMPILED_PACKAGE}.{_stem(ext.name)}"
            generated[name] = ext
        for ext in self.extensions:
            made = generated[ext.name]
            ext.sources, ext.include_dirs, ext.depends = made.sources, made.include_dirs, made.depends
            # Python never fuses a multiply and an add; neither may the C compiler (the same floats).
            ext.extra_compile_args = [*made.extra_compile_args, "-ffp-contract=off"]
        self._init_names = {f"{COMPILED_PACKAGE}.{stem}": module.rsplit(".", 1)[-1]
                            for module, stem in self._modules.items()}

    def build_extension(self, ext: Extension) -> None:
        if self.compiler.compiler_type != "unix":
            ext.extra_compile_args = [a for a in ext.extra_compile_args if a != "-ffp-contract=off"]
        super().build_extension(ext)

    def get_export_symbols(self, ext: Extension) -> list[str]:
        # A shim exports the init function of the module it stands for, not of its file name.
        return [f"PyInit_{self._init_names.get(ext.name, ext.name.rsplit('.', 1)[-1])}"]

    def _write_manifest(self) -> None:
        directory = os.path.dirname(self.get_ext_fullpath(f"{GROUP}__mypyc"))
        manifest = {
            "group": f"{GROUP}__mypyc",
            "python": sys.implementation.cache_tag,
            "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
            "modules": {module: {"file": os.path.basename(self.get_ext_fullpath(f"{COMPILED_PACKAGE}.{stem}")),
                                 "source": module.replace(".", "/") + ".py",
                                 "sha256": _sha256(module.replace(".", "/") + ".py")}
                        for module, stem in self._modules.items()},
        }
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, MANIFEST), "w") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")


# A placeholder: build_ext replaces it with mypyc's extensions (so that metadata-only steps of a
# build, which also run this file, never run mypyc), and its presence makes the wheel platform-specific.
setup(ext_modules=[Extension(f"{COMPILED_PACKAGE}.placeholder", sources=[])],
      cmdclass={"build_ext": build_compiled_engine})
