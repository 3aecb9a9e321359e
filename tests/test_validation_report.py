"""Reading fidelity results: the committed validation.json files reshape into the README's numbers,
and every malformed file is one error naming the file and the field."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from simulator import ScenarioError
from simulator.report.validation_report import (
    error_matrix,
    load_validation,
    provenance,
    scatter_points,
    targets_summary,
    validation_folders,
    validation_from_json_bytes,
    validation_table,
)

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
THREAD = RESULTS / "fidelity-thread"


@pytest.fixture
def doc():
    return load_validation(THREAD)


def test_committed_runs_are_found_and_read():
    names = [p.name for p in validation_folders(RESULTS)]
    assert {"fidelity-thread", "fidelity-wall-shared"} <= set(names)
    for folder in validation_folders(RESULTS):
        assert load_validation(folder)["rows"]


def test_newest_folder_first(tmp_path):
    for name, mtime in (("fidelity-a", 100), ("fidelity-b", 300), ("fidelity-c", 200)):
        (tmp_path / name).mkdir()
        f = tmp_path / name / "validation.json"
        f.write_text(THREAD.joinpath("validation.json").read_text())
        os.utime(f, (mtime, mtime))
    (tmp_path / "fidelity-empty").mkdir()          # no validation.json: not listed
    assert [p.name for p in validation_folders(tmp_path)] == ["fidelity-b", "fidelity-c", "fidelity-a"]


def test_table_matches_the_readme(doc):
    table = validation_table(doc)
    assert len(table) == len(doc["rows"]) + 1               # + the capacity row
    row = table[(table["load"] == 0.8) & (table["metric"] == "ttft_p50")].iloc[0]
    assert row["unit"] == "ms" and row["measured"] == pytest.approx(21.4, abs=0.05)   # README: 21.4 ms
    assert row["error"] == pytest.approx(0.033, abs=0.0005)                        # README: +3.3%
    cap = table[table["metric"] == "capacity"].iloc[0]
    assert math.isnan(cap["load"]) and cap["measured"] == pytest.approx(33.8, abs=0.05)
    assert cap["error"] == pytest.approx(-0.032, abs=0.0005) and cap["status"] == "met"
    # README: all targets met on the thread clock
    assert targets_summary(doc) == {"met": len(table), "within noise": 0, "missed": 0}


def test_status_levels():
    rows = [{"load": 0.5, "rate_per_s": 1.0, "metric": m, "measured": 1.0, "predicted": 1.0 + e, "error": e,
             "noise": 0.05, "target": 0.10} for m, e in (("ttft_p50", 0.08), ("tpot_p50", -0.12), ("e2e_p50", 0.2))]
    table = validation_table({"settings": {}, "rows": rows})
    assert table["status"].tolist() == ["met", "within noise", "missed"]
    assert targets_summary({"settings": {}, "rows": rows}) == {"met": 1, "within noise": 1, "missed": 1}


def test_error_matrix_and_scatter(doc):
    m = error_matrix(doc)
    assert list(m.index) == [0.2, 0.4, 0.6, 0.8]
    assert list(m.columns[:3]) == ["ttft_p50", "ttft_p90", "ttft_p99"]
    assert m.loc[0.4, "tpot_p50"] == pytest.approx(-0.002, abs=0.0005)          # README: -0.2%
    pts = scatter_points(doc)
    assert len(pts) == 4 * 7 and not pts["metric"].str.startswith("throughput").any()
    assert (pts["predicted_ms"] / pts["measured_ms"] - 1).round(9).tolist() == pts["error"].round(9).tolist()


def test_provenance(doc):
    info = provenance(doc)
    assert info["clock"] == "thread" and info["model"] == "tiny-llama"
    assert info["base_profile"] == "cpu-amd-epyc-tiny-llama"
    assert info["overhead"].startswith("0.40 ms/step + 127 us/request")          # README's fit
    assert provenance({"settings": {}, "rows": []}) == {}


def _bytes(d) -> bytes:
    return json.dumps(d).encode()


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("rows"), "bad.json: rows"),
    (lambda d: d.update(rows=[]), "bad.json: rows"),
    (lambda d: d["rows"][3].pop("predicted"), "bad.json: rows[3].predicted"),
    (lambda d: d["rows"][0].update(measured="fast"), "bad.json: rows[0].measured"),
    (lambda d: d["rows"][1].update(metric=7), "bad.json: rows[1].metric"),
    (lambda d: d.update(settings=[1]), "bad.json: settings"),
    (lambda d: d.pop("settings"), "bad.json: settings"),
    (lambda d: d["capacity"].pop("measured_rps"), "bad.json: capacity.measured_rps"),
    (lambda d: d.update(overhead="x"), "bad.json: overhead"),
])
def test_malformed_documents_name_the_field(doc, mutate, field):
    bad = json.loads(json.dumps(doc))
    mutate(bad)
    with pytest.raises(ScenarioError) as exc:
        validation_from_json_bytes(_bytes(bad), source="bad.json")
    assert exc.value.field == field


@pytest.mark.parametrize("data, needle", [
    (b"\xff\xfe", "not UTF-8"), (b"{rows: 1}", "not valid JSON"), (b"[1, 2]", "JSON object"),
    (b" " * 2_000_000, "too large"), (b'{"rows": [{"metric": "ttft_p50", "load": NaN}]}', "finite number"),
])
def test_bad_uploads(data, needle):
    with pytest.raises(ScenarioError, match=needle):
        validation_from_json_bytes(data, source="up.json")


def test_missing_file_names_it(tmp_path):
    with pytest.raises(ScenarioError) as exc:
        load_validation(tmp_path)
    assert exc.value.field.endswith("validation.json") and "no validation.json" in str(exc.value)
