"""The published SGLang and TensorRT-LLM points (benchmarks/published_engines.py): every point is
recorded with its source and builds the scenario it claims, every point left unchecked is refused by
the simulator for the reason it gives, and the docs' table is what the script prints."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import script_module

from simulator.errors import ScenarioError
from simulator.run.resolve import resolve
from simulator.scenario.engines import ENGINE_PRESETS

ROOT = Path(__file__).resolve().parents[1]


MOD = script_module("benchmarks/published_engines.py")
REQUIRED = ("name", "family", "model", "gpu", "tp", "quantization", "engine", "engine_label", "metric",
            "requests", "published", "unit", "source", "source_url", "date", "notes")


def test_every_point_is_recorded_with_its_source_and_load() -> None:
    names = [p["name"] for p in MOD.POINTS]
    assert len(names) == len(set(names)), "point names must be unique (--only picks by name)"
    for p in MOD.POINTS:
        missing = [k for k in REQUIRED if p.get(k) in (None, "")]
        assert not missing, f"{p['name']}: missing {missing}"
        assert re.match(r"https://github\.com/[\w.-]+/[\w.-]+/blob/[0-9a-f]{7,40}/", p["source_url"]), p["source_url"]
        assert p["metric"] == "output_tok_s" and p["unit"] == "tok/s"
        assert p["published"] > 0 and p["requests"] > 0
        ENGINE_PRESETS.lookup(p["engine"])                      # a preset that exists
        assert ("lengths" in p) != ("prompt" in p and "output" in p), f"{p['name']}: ShareGPT lengths or fixed ones"


@pytest.mark.parametrize("point", [p for p in MOD.POINTS if not p.get("not_checked")], ids=lambda p: p["name"])
def test_every_checked_point_builds_a_valid_deployment(point: dict) -> None:
    sc = MOD.scenario(point)
    resolve(sc)                                                 # capabilities, KV fit, engine preset
    assert sc.engine.preset == point["engine"]
    assert sc.deployment.tensor_parallel_size == point["tp"]
    assert sc.deployment.quantization == point["quantization"]


@pytest.mark.parametrize("point", [p for p in MOD.POINTS
                                   if p.get("not_checked") and p["not_checked"] not in MOD.SOURCE_REASONS],
                         ids=lambda p: p["name"])
def test_every_unchecked_point_is_refused_for_the_reason_it_gives(point: dict) -> None:
    """A deployment that cannot fit: the simulator refuses it (a point left out for what its source
    does not say has nothing to refuse)."""
    field = "model"
    with pytest.raises(ScenarioError, match=field):
        resolve(MOD.scenario(point))


def test_the_published_engines_table_in_the_docs_is_what_the_script_prints() -> None:
    """docs/hardware-profiles.md's SGLang and TensorRT-LLM rows are recomputed (every prediction, to
    the printed digit): the table cannot drift from the model."""
    docs = (ROOT / "docs" / "hardware-profiles.md").read_text().splitlines()
    for point in MOD.POINTS:
        pred = None if point.get("not_checked") else MOD.predict(point)
        row = {**point, "predicted": pred, "error": None if pred is None else pred / point["published"] - 1}
        assert MOD.row_line(row) in docs, f"{point['name']}: docs row differs from\n{MOD.row_line(row)}"
