"""``llmplan plan --export k8s``: per quarter and region, a Deployment and an HPA that are valid Kubernetes
objects (checked against the official schemas by kubernetes-validate) and carry the plan's numbers."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_planner import _write, base_plan
from typer.testing import CliRunner

from simulator.cli import app

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate (the dev extra) is not installed")

K8S_VERSION = "1.30.0"


def validate(doc: dict) -> None:
    """Raise unless ``doc`` is a valid object of its kind, unknown fields included (strict)."""
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """east with an N+1 share, autoscaled (floor 2, 10 min scale-down delay); two quarters; the CLI as a
    user runs it."""
    tmp = tmp_path_factory.mktemp("k8s")
    data = base_plan(failover="n_plus_one", headroom=0.2, slo={"ttft_p99_ms": 300, "attainment": 0.95},
                     forecast=[{"quarter": q, "region": r, "peak_rps": p}
                               for q, scale in (("FY27 Q1", 1.0), ("FY27 Q2", 3.0))
                               for r, p in (("east", 80 * scale), ("west", 40 * scale))])
    data["candidates"] = [{"name": "auto", "set": {"deployment.autoscaler": {
        "min_replicas": 2, "max_replicas": 40, "target_outstanding_per_replica": 2.5, "scale_down_delay_s": 600}}}]
    res = CliRunner().invoke(app, ["plan", str(_write(tmp, data)), "--out", str(tmp / "out"), "--workers", "1",
                                   "--export", "k8s", "--no-progress"])
    assert res.exit_code == 0, res.output
    return tmp / "out", pd.read_csv(tmp / "out" / "worksheet-candidates.csv")


def test_every_cell_is_a_valid_deployment_and_hpa_with_the_plans_numbers(exported):
    out, cands = exported
    files = sorted((out / "k8s").rglob("*.yaml"))
    assert [f.relative_to(out / "k8s").as_posix() for f in files] == [
        "FY27_Q1/east.yaml", "FY27_Q1/west.yaml", "FY27_Q2/east.yaml", "FY27_Q2/west.yaml"]
    for row in cands.to_dict("records"):
        docs = list(yaml.safe_load_all((out / "k8s" / row["quarter"].replace(" ", "_") / f"{row['region']}.yaml")
                                       .read_text()))
        for doc in docs:
            validate(doc)
        dep, hpa = docs
        assert (dep["kind"], hpa["kind"], hpa["apiVersion"]) == ("Deployment", "HorizontalPodAutoscaler",
                                                                 "autoscaling/v2")
        assert dep["metadata"]["name"] == f"t-{row['region']}" == hpa["spec"]["scaleTargetRef"]["name"]
        assert dep["spec"]["replicas"] == 2 == hpa["spec"]["minReplicas"]       # the floor; the HPA owns the count
        # the N+1 fleet the plan verified at the design load (peak + failover share) x (1 + headroom)
        assert hpa["spec"]["maxReplicas"] == row["replicas"]
        assert float(hpa["metadata"]["annotations"]["llmplan/design-rps"]) == pytest.approx(row["design_rps"], 1e-5)
        assert row["failover_rps"] > 0 and row["design_rps"] > row["peak_rps"]
        assert hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"] == "2500m"
        assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 600
        pod = dep["spec"]["template"]["spec"]["containers"][0]
        assert pod["resources"]["limits"]["nvidia.com/gpu"] == row["gpus"] // row["replicas"]
        args = dict(zip(pod["args"][::2], pod["args"][1::2], strict=False))
        assert args["--max-num-seqs"] == "8" and args["--max-num-batched-tokens"] == "2048"
    # the Q2 fleet is larger: the export follows each quarter's own verified count
    q = cands.set_index(["quarter", "region"])["replicas"]
    assert q[("FY27 Q2", "east")] > q[("FY27 Q1", "east")]


def test_the_validator_rejects_a_broken_object(exported):
    """The check above can fail: a wrong type or an unknown field is an error."""
    out, _ = exported
    dep, hpa = yaml.safe_load_all((out / "k8s" / "FY27_Q1" / "east.yaml").read_text())
    hpa["spec"]["maxReplicas"] = "many"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(hpa)
    dep["spec"]["replica"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(dep)


def test_a_static_candidate_is_a_fixed_deployment_and_pools_one_each():
    from simulator.planner import load_plan, plan
    from simulator.planner.k8s import k8s_manifests

    data = base_plan(failover="none", regions=[{"name": "east", "rtt_ms": {"east": 5}}],
                     forecast=[{"quarter": "Q1", "region": "east", "peak_rps": 150}])
    loaded = load_plan(data)                          # the one candidate, std: no autoscaler
    res = plan(loaded, workers=1)
    (dep,) = yaml.safe_load_all(k8s_manifests(loaded, res.worksheet).files["k8s/Q1/east.yaml"])
    validate(dep)
    assert dep["kind"] == "Deployment" and dep["spec"]["replicas"] == res.worksheet["replicas"].iat[0] > 1

    data["candidates"] = [{"name": "pools", "set": {"deployment.pools": [
        {"name": "small"}, {"name": "Large Pool", "max_num_seqs": 4}],
        "deployment.pool_routing": {"by": "prompt_tokens", "thresholds": [{"max_prompt_tokens": 64, "pool": "small"}],
                                    "default": "Large Pool"}}}]
    loaded = load_plan(data)
    res = plan(loaded, workers=1)
    docs = list(yaml.safe_load_all(k8s_manifests(loaded, res.worksheet).files["k8s/Q1/east.yaml"]))
    for doc in docs:
        validate(doc)
    assert [d["kind"] for d in docs] == ["Deployment", "Deployment"]
    counts = dict(part.rsplit("=", 1) for part in res.worksheet["pool_replicas"].iat[0].split(";"))
    assert {d["metadata"]["name"]: d["spec"]["replicas"] for d in docs} == {
        "t-east-small": int(counts["small"]), "t-east-large-pool": int(counts["Large Pool"])}
    args = docs[1]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert dict(zip(args[::2], args[1::2], strict=False))["--max-num-seqs"] == "4"   # the pool's own limit


def test_bad_exports_fail_before_planning(tmp_path: Path):
    data = base_plan()
    p = _write(tmp_path, data)
    res = CliRunner().invoke(app, ["plan", str(p), "--out", str(tmp_path / "o"), "--export", "helm"])
    assert res.exit_code == 2 and "--export = 'helm': allowed: k8s" in res.output
    res = CliRunner().invoke(app, ["plan", str(p), "--out", str(tmp_path / "w.csv"), "--export", "k8s"])
    assert res.exit_code == 2 and "give a folder, not a .csv name" in res.output
    data["candidates"] = [{"name": "slow", "set": {"deployment.autoscaler": {
        "max_replicas": 4, "target_outstanding_per_replica": 4, "scale_down_delay_s": 7200}}}]
    res = CliRunner().invoke(app, ["plan", str(_write(tmp_path, data)), "--out", str(tmp_path / "o"),
                                   "--export", "k8s"])
    assert res.exit_code == 2 and "scale_down_delay_s = 7200" in res.output and "at most 3600 s" in res.output
    assert not (tmp_path / "o").exists()
