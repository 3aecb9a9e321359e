"""The scenario package sits below the engine and the workload: it imports neither, and its
validators read no file. The few engine and workload facts a scenario is checked against (trace
format names, which policies never split a prompt) are written in the scenario package; these
tests keep them equal to the registries they stand for."""
from __future__ import annotations

import ast
from pathlib import Path

import simulator.scenario.defaults as defaults
from simulator.engine.policies import POLICIES
from simulator.scenario.config import Scenario, scenario_from_dict
from simulator.scenario.scheduler import WHOLE_PROMPT_POLICIES
from simulator.scenario.workload import TRACE_FORMAT_NAMES
from simulator.workload.traces import TRACE_FORMATS

SCENARIO = Path(__file__).resolve().parents[1] / "simulator" / "scenario"
#: The packages above the scenario: they read scenarios, never the other way round.
ABOVE = ("simulator.engine", "simulator.workload", "simulator.cluster", "simulator.run", "simulator.planner",
         "simulator.report", "simulator.metrics", "simulator.capabilities", "simulator.cli")

CHAT = {"name": "layers", "num_requests": 10, "model": "llama-3-8b", "hardware": "h100-sxm",
        "workload": {"arrival": {"process": "poisson", "rate_per_s": 1},
                     "prompt_tokens": {"dist": "fixed", "value": 100},
                     "output_tokens": {"dist": "fixed", "value": 10}}}


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports, at the top or inside functions (``TYPE_CHECKING`` blocks too)."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
    return out


def test_the_scenario_package_imports_nothing_above_it() -> None:
    wrong = [f"{path.name}: {name}" for path in sorted(SCENARIO.glob("*.py")) for name in _imports(path)
             if any(name == top or name.startswith(top + ".") for top in ABOVE)]
    assert not wrong, wrong


def test_trace_format_names_are_the_registered_readers() -> None:
    assert set(TRACE_FORMAT_NAMES) == set(TRACE_FORMATS)


def test_whole_prompt_policies_are_the_engine_classes_that_never_split_a_prompt() -> None:
    engine = {name for name, cls in POLICIES.items() if cls.uses_token_budget and not cls.splits_prompts}
    assert engine == WHOLE_PROMPT_POLICIES


def test_validation_reads_no_profile_and_loading_fills_the_preset(monkeypatch) -> None:
    """``Scenario.model_validate`` checks the fields only; ``scenario_from_dict`` then reads the hardware
    profile and fills the fields the scenario left out from the engine preset, leaving them unset."""
    read: list[object] = []
    real = defaults.load_profile
    monkeypatch.setattr(defaults, "load_profile", lambda *a, **k: read.append(a) or real(*a, **k))
    data = {**CHAT, "engine": "vllm-v1", "scheduler": {"max_num_seqs": 64}}
    bare = Scenario.model_validate(data)
    assert read == [] and bare.scheduler.policy == "continuous"            # the field's own default
    sc = scenario_from_dict(data)
    assert len(read) == 1
    assert sc.scheduler.policy == "chunked_prefill" and sc.scheduler.max_num_batched_tokens == 8192   # H100
    assert sc.scheduler.max_num_seqs == 64 and sc.scheduler.model_fields_set == {"max_num_seqs"}
    switched = sc.with_overrides({"engine": "sglang"})
    assert switched.scheduler.block_size == 1 and switched.scheduler.model_fields_set == {"max_num_seqs"}


#: The simulator's layers, lowest first, as docs/design.md draws them: a module imports only from its own
#: layer or below. ``run.simulate -> metrics`` is the one import back up (the run hands the summary
#: function to its result; ``metrics`` reads the run's records and knows no feature).
LAYERS = (("errors", "registry", "arguments", "critical_values", "output", "native"), ("scenario",), ("workload",),
          ("cost",), ("engine",), ("cluster",), ("capabilities",), ("run",), ("metrics", "slo", "steady_state"),
          ("planner",), ("report",), ("importers",), ("cli",))
UPWARD_ALLOWED = {("simulator.run.simulate", "metrics")}


def test_every_import_runs_down_the_layers_but_the_one_the_design_names() -> None:
    rank = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    root = SCENARIO.parent
    up, unplaced = [], []
    for path in sorted(root.rglob("*.py")):
        if "_compiled" in path.parts:
            continue
        rel = path.relative_to(root.parent).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        layer = module.split(".")[1] if "." in module else None
        if layer is None:
            continue
        if layer not in rank:
            unplaced.append(module)
            continue
        for name in _imports(path):
            target = name.split(".")[1] if name.startswith("simulator.") else None
            if target in rank and rank[target] > rank[layer] and (module, target) not in UPWARD_ALLOWED:
                up.append(f"{module} -> {name}")
    assert not unplaced, f"modules in no layer (add them to LAYERS and docs/design.md): {unplaced}"
    assert not up, f"imports running back up the layers: {up}"
