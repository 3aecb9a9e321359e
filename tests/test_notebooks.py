"""Every analysis notebook in ``notebooks/`` runs top to bottom (small size) without an error, and
the committed notebooks are exactly what ``notebooks/build.py`` writes (no outputs)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_the_notebooks_exist_and_are_current():
    assert [p.name for p in NOTEBOOKS] == ["01_latency_vs_throughput.ipynb", "02_real_traffic.ipynb",
                                           "03_speculative_decoding.ipynb", "04_calibration_review.ipynb",
                                           "05_prefix_caching.ipynb", "06_quarterly_worksheet.ipynb",
                                           "07_fidelity.ipynb"]
    done = subprocess.run([sys.executable, str(REPO / "notebooks" / "build.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Executed in a fresh kernel from the notebooks folder (as a user opens it), importing this
    checkout's ``simulator``; LLMPLAN_NOTEBOOK_SCALE=small; plotly renders to JSON (small outputs).
    A cell that raises fails the test with the cell's traceback."""
    monkeypatch.setenv("LLMPLAN_NOTEBOOK_SCALE", "small")
    monkeypatch.setenv("PLOTLY_RENDERER", "json")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code"
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert any(o.get("data", {}).get("application/json") or o.get("data", {}).get("application/vnd.plotly.v1+json")
               for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])), "no figure rendered"
