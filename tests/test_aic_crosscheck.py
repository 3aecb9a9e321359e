"""benchmarks/aic_step_crosscheck.py: its per-op decomposition of our step is the cost model's own
(it sums to ``breakdown``), and without aiconfigurator-core it says how to install it."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from conftest import script_module

from simulator.cost.base import BatchShape

ROOT = Path(__file__).resolve().parents[1]


def _script():
    return script_module("benchmarks/aic_step_crosscheck.py")


def test_per_op_groups_add_up_to_the_step() -> None:
    s = _script()
    for case in s.CASES:
        rs, cm = s.our_model(case)
        for shape in (BatchShape.decode(64, 64 * 1000), BatchShape.prefill(2048), BatchShape.prefill(512, 1536),
                      BatchShape((2048,), (0,), 256, 256 * 2050, 257)):
            ops = s.our_ops(cm, rs.model, shape)      # raises if the groups miss part of the step
            assert set(ops) == set(s.GROUPS)
            assert sum(ops.values()) == pytest.approx(1e3 * cm.step_time_s(shape), rel=1e-9)
            assert (ops["all_reduce"] > 0) == (case.tp > 1)


def test_without_aiconfigurator_it_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _script()
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)     # import fails
    monkeypatch.setattr(sys, "argv", ["aic_step_crosscheck.py"])
    with pytest.raises(SystemExit, match=re.escape("pip install 'aiconfigurator-core==0.12.0'")):
        s.main()
