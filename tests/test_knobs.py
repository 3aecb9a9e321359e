"""The dashboard's knob table (``simulator.report.knobs``) against the scenario models, without streamlit:
every row names a real field, stays within its validation limits, shows the field's own documentation,
and round-trips a scenario through the knobs unchanged."""
from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import annotated_types
import pytest

from simulator import ScenarioError, load_scenario, resolve
from simulator.capabilities import POLICY_SUPPORT, YES
from simulator.engine.policies import POLICIES
from simulator.report.knobs import (
    FROM_FILE,
    GROUPS,
    KNOB,
    KNOBS,
    apply_knobs,
    field_owners,
    knob_values,
    policy_support,
    query_of,
    token_budget_rule,
    values_from_query,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.yaml") if not p.name.startswith("plan-"))
REFERENCE = (ROOT / "docs" / "scenario-reference.md").read_text()


@pytest.fixture(scope="module")
def chat():
    return load_scenario(ROOT / "examples" / "chat-h100.yaml", {"num_requests": 200})


def test_the_table_is_streamlit_free():
    code = "import sys, simulator.report.knobs; assert not {'streamlit', 'plotly'} & set(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_every_row_sets_a_scenario_field():
    for knob in KNOBS:
        assert field_owners(knob.path), knob.key
        assert knob.group in dict(GROUPS), knob.key
    assert len({k.key for k in KNOBS}) == len(KNOBS)
    assert len({k.query_name for k in KNOBS}) == len(KNOBS)
    assert len({k.path for k in KNOBS}) == len(KNOBS)
    with pytest.raises(KeyError, match="no such scenario field"):
        field_owners("scheduler.max_num_seq")


def _bounds(knob):
    for model in knob.models:
        yield from model.model_fields[knob.leaf].metadata


def test_bounds_are_within_the_fields_limits():
    """A widget never offers a value the scenario would refuse by its range (the unset value aside)."""
    for knob in KNOBS:
        if knob.widget not in ("number", "slider"):
            continue
        for value in (knob.min_value, knob.max_value):
            if value is None or value == knob.unset:
                continue
            for limit in _bounds(knob):
                if isinstance(limit, annotated_types.Ge):
                    assert value >= limit.ge, (knob.key, value, limit)
                if isinstance(limit, annotated_types.Gt):
                    assert value > limit.gt, (knob.key, value, limit)
                if isinstance(limit, annotated_types.Le):
                    assert value <= limit.le, (knob.key, value, limit)
                if isinstance(limit, annotated_types.Lt):
                    assert value < limit.lt, (knob.key, value, limit)
        if knob.value_type is int:      # an integer field gets an integer widget
            assert all(isinstance(v, int) for v in (knob.min_value, knob.max_value, knob.step) if v is not None), knob
        if knob.unset is not None:      # "0 = off" is the widget's lowest value
            assert knob.min_value == knob.unset, knob.key


def test_help_is_the_fields_documentation():
    """The tooltip starts with the field's description as docs/scenario-reference.md prints it; a note
    only adds what the page does."""
    for knob in KNOBS:
        if knob.description:
            assert knob.help.startswith(knob.description), knob.key
            row = f"| `{knob.leaf}` |"
            assert any(line.startswith(row) and knob.description.replace("|", "\\|") in line
                       for line in REFERENCE.splitlines()), (knob.key, knob.description)
        if knob.note:
            assert knob.help.endswith(knob.note) and knob.note not in knob.description, knob.key
    assert KNOB["max_num_seqs"].help == "Most requests in the running batch."


def test_the_token_budget_rule_is_the_one_resolve_applies(chat):
    """Under exactly the policies the help names, a budget below max_model_len is refused."""
    rule = token_budget_rule()
    assert KNOB["max_num_batched_tokens"].help.endswith(rule)
    refused = []
    for policy in sorted(POLICIES):
        pools = {"deployment.prefill_replicas": 1, "deployment.decode_replicas": 1} if policy == "disaggregated" else {}
        sc = chat.with_overrides({"scheduler.policy": policy, "scheduler.max_model_len": 4096,
                                  "scheduler.max_num_batched_tokens": 2048, **pools})
        try:
            resolve(sc)
        except ScenarioError as exc:
            if exc.field == "scheduler.max_num_batched_tokens":
                refused.append(policy)
    assert refused and rule.startswith(f"Must be >= max_model_len under {' and '.join(refused)},"), (refused, rule)


def test_policy_notes_come_from_the_capability_table():
    supported = [p for p, row in sorted(POLICY_SUPPORT.items()) if row["speculative_decoding"] is YES]
    assert policy_support("speculative_config.method", "speculative_config").endswith(
        ", ".join(supported[:-1]) + " and " + supported[-1] + ".")
    assert "speculative decoding" in KNOB["spec_method"].help
    assert "prefix caching" in KNOB["prefix_caching"].help
    assert policy_support("scheduler.max_num_seqs") == ""


def test_choices_and_conditions():
    for knob in KNOBS:
        if knob.widget == "select":
            options = knob.options(None)
            assert options, knob.key
            if knob.unset is not None:
                assert options[0] == knob.unset, knob.key
        if knob.widget == "toggle":
            assert knob.value_type.__name__ == "flag", knob.key
        if knob.when is not None:
            other = KNOB[knob.when[0]]
            assert KNOBS.index(other) < KNOBS.index(knob), knob.key      # drawn first, so its value is known
            assert set(knob.when[1]) <= set(other.options(None)), knob.key
    assert KNOB["scheduling"].options(None) == ["fcfs", "priority"]          # the field's Literal
    assert KNOB["tp"].options(3) == [1, 2, 3, 4, 8]
    assert KNOB["model"].options("llama-3-8b", inline=True)[-1] == FROM_FILE


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_a_scenario_round_trips_through_its_knobs(path):
    """Each knob at the value the scenario has validates and gives the same knob values back."""
    base = load_scenario(path)
    values = knob_values(base)
    again = apply_knobs(base, values)
    assert knob_values(again) == values
    assert apply_knobs(again, values) == again
    query = query_of(values)
    restored = {**values}
    assert values_from_query(restored, query) == []
    assert restored == values


def test_every_choice_and_bound_validates_or_names_the_field(chat):
    """Any value a widget offers gives a valid scenario or a ScenarioError, never an internal error."""
    values = knob_values(chat)
    for knob in KNOBS:
        if values[knob.key] is None:
            continue
        offered = (knob.options(values[knob.key]) if knob.widget == "select" else [True, False]
                   if knob.widget == "toggle" else [v for v in (knob.min_value, knob.max_value) if v is not None])
        for value in offered:
            if value == FROM_FILE:
                continue
            with contextlib.suppress(ScenarioError):
                apply_knobs(chat, {**values, knob.key: value})


def test_knobs_change_what_they_name(chat):
    values = knob_values(chat)
    sc = apply_knobs(chat, {**values, "max_num_batched_tokens": 16384, "slo_ttft_ms": 0.0, "cv": 2.0,
                            "spec_method": "ngram", "spec_k": 3, "engine": "sglang", "async": False})
    assert sc.scheduler.max_num_batched_tokens == 16384
    assert sc.slo.ttft_p99_ms is None
    assert sc.workload.arrival.process == "gamma" and sc.workload.arrival.cv == 2.0
    assert sc.speculative_config.method == "ngram" and sc.speculative_config.draft_model is None
    assert sc.engine.preset == "sglang" and sc.engine.runs_async is False
    off = apply_knobs(sc, {**knob_values(sc), "spec_method": "off", "engine": "(none)"})
    assert off.speculative_config is None and off.engine is None


def test_query_parameters(chat):
    values = knob_values(chat)
    warnings = values_from_query(values, {"rate": "3.5", "n": "400", "seqs": "nonsense", "prefix": "yes",
                                          "speedup": "2", "unknown": "1"})
    assert values["rate"] == 3.5 and values["num_requests"] == 400 and values["prefix_caching"] is True
    assert values["speedup"] is None                                      # not a trace: does not apply
    assert warnings == ["Ignored query parameter seqs='nonsense': not a int."]
