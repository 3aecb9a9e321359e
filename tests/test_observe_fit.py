"""``llmplan observe`` and ``llmplan calibrate --from-observation`` end to end, on a fake engine.

The fake engine is a small HTTP server on 127.0.0.1 (bounded: it serves a fixed number of
requests and shuts itself down) that streams OpenAI-style completion chunks. In the fitting test
its token instants come from the simulator run with known costs (a per-step CPU time and a factor
on the kernel table), and the observer reads a *virtual* clock the server advances in lockstep:
the server moves the clock to a chunk's scheduled instant, writes the chunk and waits until the
observer has read the clock for it. So the observation holds the simulated schedule exactly,
whatever the machine's load, and the fit must recover the known costs.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from calibrate.fit import (
    CLIP,
    _residuals,
    errors,
    format_report,
    nelder_mead,
    replay_scenario,
    scaled_profile,
    server_counters,
)
from calibrate.observe import Lengths, Load, observe, parse_metrics
from simulator import ScenarioError, load_scenario, scenario_from_dict, simulate
from simulator.scenario.models import MODEL_PRESETS
from simulator.scenario.profiles import load_profile
from simulator.workload.observation import Observation, read_observation, run_names

REPO = Path(__file__).resolve().parents[1]
BASE_PROFILE = "cpu-amd-epyc-tiny-llama"
SCHEDULER = {"max_num_seqs": 16, "max_num_batched_tokens": 1024, "max_model_len": 1024}
TRUE_STEP_S, TRUE_SCALE, TRUE_PER_TOKEN_S, TRUE_FRONTEND_S = 0.004, 0.6, 2e-5, 0.012
METRICS = ("# HELP vllm:num_requests_running running\n# TYPE vllm:num_requests_running gauge\n"
           'vllm:num_requests_running{model_name="tiny"} 0.0\nvllm:num_requests_waiting{model_name="tiny"} 0.0\n'
           'vllm:prefix_cache_hits_total{model_name="tiny"} %d\nvllm:num_preemptions_total{model_name="tiny"} 0\n'
           "process_cpu_seconds_total 1.5\n")


#: Run as if torch were not installed: observing and fitting must not need it.
NO_TORCH = ("import sys, importlib.abc\n"
            "class NoTorch(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
            "sys.meta_path.insert(0, NoTorch())\n"
            "from simulator.cli import main\n"
            "sys.argv = ['llmplan', *sys.argv[1:]]\n"
            "main()\n")


def run_cli(*args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """``llmplan ARGS`` in a process that cannot import torch (with ``extra_env`` set)."""
    env = {k: v for k, v in os.environ.items() if k != "LLMPLAN_DEBUG"} | extra_env
    proc = subprocess.run([sys.executable, "-c", NO_TORCH, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


class VirtualClock:
    """The observer's clock: the instant the server last set; every reading is counted."""

    def __init__(self) -> None:
        self.now, self.reads = 0.0, 0
        self.cond = threading.Condition()

    def __call__(self) -> float:
        with self.cond:
            self.reads += 1
            self.cond.notify_all()
            return self.now


def chunk(k: int, prompt: int, text: str = "x") -> bytes:
    return ("data: " + json.dumps({"object": "text_completion", "choices": [{"index": 0, "text": text}],
                                   "usage": {"prompt_tokens": prompt, "completion_tokens": k}}) + "\n\n").encode()


def usage_chunk(k: int, prompt: int) -> bytes:
    return ("data: " + json.dumps({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": k}})
            + "\n\n").encode()


#: Tokens the fake engine's chat template adds to a user message.
CHAT_TEMPLATE_TOKENS = 5


class _Server(ThreadingHTTPServer):
    # A burst's connections all arrive at once: a backlog of socketserver's default 5 can drop one
    # on a busy machine, and a lockstep replay then waits for a request that never came.
    request_queue_size = 256
    daemon_threads = True


class FakeEngine:
    """An OpenAI-compatible streaming server on 127.0.0.1 for at most ``max_requests`` requests.

    ``schedule``: None streams each request's tokens at once (wall clock, no timing claims);
    otherwise, once ``expected`` requests are in, ``schedule(bodies)`` gives each request's token
    instants and the server replays them in time order on ``clock`` (lockstep, module doc)."""

    def __init__(self, max_requests: int, schedule: Callable[[list[dict[str, Any]]], list[list[float]]] | None = None,
                 clock: VirtualClock | None = None, expected: int = 0, fail_every: int = 0,
                 api_key: str | None = None) -> None:
        self.max_requests, self.schedule, self.clock, self.expected = max_requests, schedule, clock, expected
        self.fail_every, self.api_key = fail_every, api_key
        self.lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []
        self.queues: list[queue.Queue[bytes | None]] = []
        self.in_flight = self.max_in_flight = self.served = 0
        self.error: str | None = None
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"      # streams in chunked transfer encoding, as vLLM's server does

            def log_message(self, *args: Any) -> None:
                pass

            def _chunk(self, data: bytes) -> None:
                for part in (data[:9], data[9:]):           # a line split across chunks, too
                    if part:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()

            def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _refused(self) -> bool:
                """Without the key (when it has one), /v1/* answers 401, as vLLM's --api-key does."""
                if engine.api_key and self.path.startswith("/v1/") and \
                        self.headers.get("Authorization") != f"Bearer {engine.api_key}":
                    self._send(401, b'{"error": "Unauthorized"}')
                    return True
                return False

            def do_GET(self) -> None:
                if self._refused():
                    return
                if self.path == "/v1/models":
                    self._send(200, json.dumps({"data": [{"id": "tiny", "object": "model"}]}).encode())
                elif self.path == "/version":
                    self._send(200, b'{"version": "0.0.fake"}')
                elif self.path == "/metrics":
                    self._send(200, (METRICS % engine.served).encode(), "text/plain")
                else:
                    self._send(404, b"{}")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self._refused():
                    return
                with engine.lock:
                    n = len(engine.bodies)
                    if n >= engine.max_requests:
                        self._send(503, b'{"error": "the fake engine is done"}')
                        return
                    engine.bodies.append(body)
                    engine.served += 1          # requests taken in (what /metrics counts)
                    q: queue.Queue[bytes | None] = queue.Queue()
                    engine.queues.append(q)
                    engine.in_flight += 1
                    engine.max_in_flight = max(engine.max_in_flight, engine.in_flight)
                    if engine.schedule is not None and len(engine.bodies) == engine.expected:   # once: the last in
                        threading.Thread(target=engine.replay, daemon=True).start()
                try:
                    if engine.fail_every and n % engine.fail_every == engine.fail_every - 1:
                        self._send(400, b'{"error": "bad request"}')
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    if engine.schedule is None and self.path == "/v1/chat/completions":
                        # a chat template of CHAT_TEMPLATE_TOKENS, a first chunk with the role only
                        p = len(body["messages"][-1]["content"].split()) + CHAT_TEMPLATE_TOKENS
                        m = body["max_tokens"]
                        for k in range(m + 1):
                            delta = {"content": "x"} if k else {"role": "assistant", "content": ""}
                            self._chunk(("data: " + json.dumps({
                                "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}],
                                "usage": {"prompt_tokens": p, "completion_tokens": k}}) + "\n\n").encode())
                        self._chunk(usage_chunk(m, p) + b"data: [DONE]\n\n")
                    elif engine.schedule is None:
                        prompt = body["prompt"]
                        p, m = len(prompt.split() if isinstance(prompt, str) else prompt), body["max_tokens"]
                        for k in range(1, m + 1):
                            self._chunk(chunk(k, p))
                        self._chunk(usage_chunk(m, p) + b"data: [DONE]\n\n")
                    else:
                        while (line := q.get(timeout=60)) is not None:
                            self._chunk(line)
                    self.wfile.write(b"0\r\n\r\n")
                    self.close_connection = True
                finally:
                    with engine.lock:
                        engine.in_flight -= 1

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def replay(self) -> None:
        """Stream every request's chunks at its scheduled instants, in time order, in lockstep."""
        assert self.schedule is not None and self.clock is not None
        try:
            times = self.schedule(self.bodies)
            events = []
            for i, (body, ts) in enumerate(zip(self.bodies, times, strict=True)):
                p = len(body["prompt"])
                events += [(t, i, k, chunk(k + 1, p)) for k, t in enumerate(ts)]
                events += [(ts[-1], i, len(ts), usage_chunk(len(ts), p)), (ts[-1], i, len(ts) + 1, b"data: [DONE]\n\n")]
            for t, i, _, line in sorted(events, key=lambda e: e[:3]):
                with self.clock.cond:
                    self.clock.now = t
                    target = self.clock.reads + 1
                self.queues[i].put(line)
                with self.clock.cond:
                    if not self.clock.cond.wait_for(lambda: self.clock.reads >= target, timeout=60):  # noqa: B023
                        raise TimeoutError(f"the observer did not read chunk {t} of request {i}")
            for q in self.queues:
                q.put(None)
        except Exception as exc:      # reported by the test (engine.error)
            self.error = f"{type(exc).__name__}: {exc}"
            for q in self.queues:
                q.put(None)

    @contextmanager
    def running(self) -> Iterator[FakeEngine]:
        th = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        th.start()
        guard = threading.Timer(300, self.server.shutdown)     # stops itself even if a test hangs
        guard.daemon = True
        guard.start()
        try:
            yield self
        finally:
            guard.cancel()
            self.server.shutdown()
            self.server.server_close()
            th.join(10)


def true_hardware(tmp: Path, step_s: float = TRUE_STEP_S) -> dict[str, Any]:
    """The base profile with the true costs (another engine's CPU time per step with ``step_s``), built here
    from the files (independently of calibrate.fit)."""
    base = load_profile(BASE_PROFILE)
    table = pd.read_csv(base.table)
    for c in ("median_s", "p10_s", "p90_s", "std_s"):
        table[c] *= TRUE_SCALE
    table.to_csv(tmp / "true-ops.csv", index=False)
    data = base.model_dump(mode="json", exclude_none=True)
    data.pop("table_sha256")
    data.update(table=str(tmp / "true-ops.csv"), peak_flops={k: v / TRUE_SCALE for k, v in base.peak_flops.items()},
                memory_bandwidth_bytes_per_s=base.memory_bandwidth_bytes_per_s / TRUE_SCALE,
                overhead={**data["overhead"], "step_s": step_s, "per_token_s": TRUE_PER_TOKEN_S,
                          "frontend_s": TRUE_FRONTEND_S})
    return data


def simulated_token_times(tmp: Path, hardware: dict[str, Any], bodies: list[dict[str, Any]],
                          order: dict[tuple[int, ...], int]) -> list[list[float]]:
    """Each request's token instants from the simulator (every request arriving at 0, in the
    observer's order): the first token at its TTFT, the rest evenly to its end."""
    rows = sorted((order[tuple(b["prompt"])], len(b["prompt"]), b["max_tokens"]) for b in bodies)
    trace = tmp / f"burst-{len(rows)}.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 0, "input_length": p, "output_length": m, "hash_ids": []}) + "\n"
                             for _, p, m in rows))
    sc = scenario_from_dict({"name": "truth", "model": "tiny-llama", "hardware": hardware, "scheduler": SCHEDULER,
                             "workload": {"arrival": {"process": "trace", "path": str(trace), "format": "mooncake"}}})
    req = simulate(sc).requests.sort_values("request_id")
    by_client = []
    for r in req.itertuples():
        n = int(r.num_output_tokens)
        by_client.append([r.ttft_s + k * (r.e2e_s - r.ttft_s) / max(1, n - 1) for k in range(n)])
    return [by_client[order[tuple(b["prompt"])]] for b in bodies]


def observe_burst(tmp: Path, name: str, n: int, seed: int, step_s: float = TRUE_STEP_S) -> Path:
    """An offline burst of ``n`` requests observed on the fake engine with the true costs (the CPU time
    per step ``step_s``)."""
    load = Load("offline", n, Lengths(32, 256), Lengths(8, 40), seed=seed, timeout_s=120)
    _, prompts, _ = load.plan()
    order = {tuple(p): i for i, p in enumerate(prompts)}
    hw = true_hardware(tmp, step_s)
    clock = VirtualClock()
    engine = FakeEngine(n, lambda bodies: simulated_token_times(tmp, hw, bodies, order), clock, expected=n)
    out = tmp / f"{name}.json"
    with engine.running():
        doc = observe(engine.url, load, out, clock=clock)
    assert engine.error is None, engine.error
    assert doc["header"]["client"]["host_pauses"] is None       # a test's clock: nothing to watch
    return out


def to_vllm_bench(obs_path: Path, out: Path) -> Path:
    """The same run as `vllm bench serve --save-detailed` writes it (absolute start_times, itls)."""
    doc = json.loads(obs_path.read_text())
    reqs = doc["requests"]
    bench = {"date": "20261205-090000", "backend": "vllm", "model_id": "tiny", "request_rate": "inf",
             "max_concurrency": None, "completed": len(reqs),
             "input_lens": [r["prompt_tokens"] for r in reqs], "output_lens": [r["output_tokens"] for r in reqs],
             "ttfts": [r["first_token_s"] - r["send_s"] for r in reqs],
             "itls": [list(np.diff(r["chunk_s"])) for r in reqs],
             "start_times": [12345.0 + r["send_s"] for r in reqs], "errors": ["" for _ in reqs]}
    out.write_text(json.dumps(bench))
    return out


def test_observe_fit_recovers_the_engine_costs_and_predicts_a_held_out_run(tmp_path: Path) -> None:
    """observe -> calibrate --from-observation -> simulate, on a fake engine whose costs are known."""
    light = observe_burst(tmp_path, "burst-4", 4, seed=1)
    heavy = observe_burst(tmp_path, "burst-16", 16, seed=2)
    held = to_vllm_bench(observe_burst(tmp_path, "burst-10", 10, seed=3), tmp_path / "bench-10.json")
    obs = read_observation(heavy)
    assert obs.source == "llmplan observe" and len(obs.completed) == 16 and (obs.requests["send_s"] == 0).all()
    h = obs.header
    assert h["model"] == "tiny" and h["engine"]["version"] == "0.0.fake" and h["load"]["arrival"] == "offline"
    assert h["metrics_before"]['vllm:num_requests_running{model_name="tiny"}'] == 0.0
    assert h["metrics_delta"]['vllm:prefix_cache_hits_total{model_name="tiny"}'] == 16   # the fake's counter
    doc = json.loads(heavy.read_text())
    assert all(r["usage"] == "server" and sum(r["chunk_tokens"]) == r["output_tokens"] == r["max_tokens"]
               for r in doc["requests"])

    scenario = tmp_path / "served.yaml"
    scenario.write_text(yaml.safe_dump({"hardware": BASE_PROFILE, "scheduler": SCHEDULER}))
    out = tmp_path / "fitted"
    proc = run_cli("calibrate", "--from-observation", str(light), "--from-observation", str(heavy),
                   "--holdout", str(held), "--model", "tiny-llama", "--scenario", str(scenario), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "fitted step_s = " in proc.stdout and "held out bench-10.json" in proc.stdout
    fit = json.loads((out / "fit.json").read_text())
    assert fit["parameters"]["step_s"] == pytest.approx(TRUE_STEP_S, rel=0.03)
    assert fit["parameters"]["kernel_scale"] == pytest.approx(TRUE_SCALE, rel=0.03)
    assert fit["parameters"]["per_token_s"] == pytest.approx(TRUE_PER_TOKEN_S, rel=0.05)
    assert fit["parameters"]["frontend_s"] == pytest.approx(TRUE_FRONTEND_S, rel=0.05)
    assert fit["loss"] < 1e-3 < fit["loss_at_base"]
    # the fake server's counters beside the replay's (a vllm bench serve file has none)
    assert fit["server_counters"][str(heavy)]["prefix_cache_hit_tokens"] == {"server": 16.0, "replay": 0.0}
    assert fit["server_counters"][str(held)] == {} and "warning" not in proc.stderr
    for e in fit["holdout_error"].values():
        for k in ("ttft_p50", "tpot_p50", "e2e_p50", "e2e_p90", "throughput"):
            assert abs(e[k]) < 0.03, (k, e)

    prof = load_profile(str(out))
    assert prof.source == "fitted" and prof.cost_model == "table"
    assert prof.overhead.step_s == pytest.approx(fit["parameters"]["step_s"])
    assert prof.overhead.frontend_s == pytest.approx(fit["parameters"]["frontend_s"])
    prov = prof.provenance
    assert prov["engine"]["version"] == "0.0.fake" and prov["model"] == "tiny-llama"
    assert [Path(r["path"]).name for r in prov["runs"]] == ["burst-4.json", "burst-16.json"]
    assert [r["source"] for r in prov["holdout_runs"]] == ["vllm bench serve"]
    assert set(prov["fit_error_median_abs"]) >= {"ttft_p50", "tpot_p50", "throughput"}
    assert fit["leave_one_out"] is None and "leave_one_out" not in prov and "leaving out" not in proc.stdout
    # The fitted profile plans: the held-out run replayed in a scenario on it.
    sc = tmp_path / "replay.yaml"
    sc.write_text(yaml.safe_dump({"model": "tiny-llama", "hardware": str(out), "scheduler": SCHEDULER,
                                  "workload": {"arrival": {"process": "trace", "path": str(held),
                                                           "format": "observation"}}}))
    r = simulate(load_scenario(sc))
    assert r.summary["requests"]["completed"] == 10
    assert r.summary["ttft_s"]["p50"] == pytest.approx(np.median(read_observation(held).completed["ttft_s"]), rel=0.03)


def test_leave_one_out_says_how_far_the_costs_move_and_finds_a_run_of_another_engine(tmp_path: Path) -> None:
    """--leave-one-out: refits on runs of one engine agree and predict the run each left out; among runs
    of one engine a run of another (five times the CPU time per step) moves the costs, is mispredicted
    when left out, and the held-out run's errors get a range."""
    runs = [observe_burst(tmp_path, f"burst-{n}", n, seed=n) for n in (4, 8, 12)]
    odd = observe_burst(tmp_path, "slow-8", 8, seed=21, step_s=5 * TRUE_STEP_S)
    base = load_profile(BASE_PROFILE).model_dump(mode="json", exclude_none=True)
    base["overhead"] = {**base["overhead"], "per_token_s": TRUE_PER_TOKEN_S, "frontend_s": TRUE_FRONTEND_S}
    scenario = tmp_path / "served.yaml"          # two costs to fit, so the refits take seconds
    scenario.write_text(yaml.safe_dump({"hardware": base, "scheduler": SCHEDULER}))

    def fit(name: str, fitted: list[Path], held: list[Path], *extra: str) -> tuple[Any, dict[str, Any]]:
        args = [a for p in fitted for a in ("--from-observation", str(p))] + \
            [a for p in held for a in ("--holdout", str(p))]
        proc = run_cli("calibrate", *args, "--model", "tiny-llama", "--scenario", str(scenario), "--fit",
                       "step_s,kernel_scale", "--max-evals", "80", "--out", str(tmp_path / name), *extra)
        return proc, json.loads((tmp_path / name / "fit.json").read_text()) if proc.returncode == 0 else {}

    proc, _ = fit("two", runs[:2], [], "--leave-one-out")
    assert proc.returncode == 2 and "--leave-one-out" in proc.stderr and "at least 3" in proc.stderr
    proc = run_cli("calibrate", "--model", "tiny-llama", "--leave-one-out", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and "--leave-one-out" in proc.stderr
    proc, _ = fit("w", runs, [], "--workers", "2")
    assert proc.returncode == 2 and "--workers" in proc.stderr and "--leave-one-out too" in proc.stderr
    proc, _ = fit("w", runs, [], "--leave-one-out", "--workers", "0")
    assert proc.returncode == 2 and "--workers" in proc.stderr and ">= 1" in proc.stderr

    proc, same = fit("same", runs, [], "--leave-one-out")            # refits in worker processes
    assert proc.returncode == 0, proc.stderr
    assert f"3 refits, {min(3, os.cpu_count() or 1)} at a time" in proc.stderr     # a worker per CPU, 3 at most
    loo = same["leave_one_out"]
    assert "leaving out each fitted run in turn (3 refits): step_s" in proc.stdout
    assert [Path(r["left_out"]).name for r in loo["refits"]] == ["burst-4.json", "burst-8.json", "burst-12.json"]
    for name, true in (("step_s", TRUE_STEP_S), ("kernel_scale", TRUE_SCALE)):
        c = loo["costs"][name]
        assert c["value"] == pytest.approx(true, rel=0.03) and c["min"] <= c["max"] < 1.05 * c["min"]
        assert c["jackknife_se_log"] < 0.03
    for e in loo["left_out_error"].values():
        assert abs(e["ttft_p50"]) < 0.03 and abs(e["tpot_p50"]) < 0.03
    _, inline = fit("same-inline", runs, [], "--leave-one-out", "--workers", "1")    # the same, in one process
    assert [r["parameters"] for r in inline["leave_one_out"]["refits"]] == [r["parameters"] for r in loo["refits"]]
    prov = load_profile(str(tmp_path / "same")).provenance["leave_one_out"]
    assert prov["refits"] == 3 and prov["costs"]["step_s"] == pytest.approx(loo["costs"]["step_s"])
    assert loo["warnings"] == prov["warnings"] == [] and "warning" not in proc.stderr
    assert prov["left_out_error_median_abs"]["tpot_p50"] < 0.03

    proc, mixed = fit("mixed", [runs[0], runs[1], odd], [runs[2]], "--leave-one-out", "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    assert "3 refits, 1 at a time" in proc.stderr and "without slow-8.json: step_s = " in proc.stderr
    loo = mixed["leave_one_out"]
    assert loo["left_out_error"][str(odd)]["tpot_p50"] < -0.3        # the two true runs' engine is faster
    assert max(abs(loo["left_out_error"][str(p)]["tpot_p50"]) for p in runs[:2]) > 0.1   # fitted with the odd
    step = loo["costs"]["step_s"]
    assert step["max"] > 1.5 * step["min"] and step["jackknife_se_log"] > 0.2
    assert any(w.startswith("step_s = ") and "rests on slow-8.json: without it" in w for w in loo["warnings"])
    assert "warning: step_s = " in proc.stderr
    lo, hi = loo["holdout_band"][str(runs[2])]["tpot_p50"]
    assert hi - lo > 0.2 and "(held-out errors in brackets: their range over the refits)" in proc.stdout
    assert f"held out burst-12.json: ttft p50 {100 * mixed['holdout_error'][str(runs[2])]['ttft_p50']:+.1f}% (" \
        in proc.stdout


def test_observe_drives_poisson_and_closed_loads_and_the_run_replays(tmp_path: Path) -> None:
    """Poisson and closed-loop loads against the fake engine (wall clock: no timing is asserted);
    the closed loop never has more requests in flight than clients; failed requests are recorded
    and left out of the replay, which has the observation's arrivals and lengths."""
    load = Load("poisson", 12, Lengths(20, 40), Lengths(3, 6), rate_per_s=400.0, prefix_tokens=16, prefix_groups=2,
                seed=5, timeout_s=60)
    engine = FakeEngine(12, fail_every=5)
    with engine.running():
        doc = observe(engine.url, load, tmp_path / "poisson.json")
    assert len(engine.bodies) == 12 and doc["header"]["requests_failed"] == 2
    host = doc["header"]["client"]["host_pauses"]         # the real clock: the heartbeat watched the run
    assert host["heartbeat_s"] == 0.01 and isinstance(host["pauses"], list)
    b = engine.bodies
    assert all(x["stream"] and x["ignore_eos"] and x["min_tokens"] == x["max_tokens"] for x in b)
    assert all(x["stream_options"]["include_usage"] for x in b)
    groups = {tuple(x["prompt"][:16]) for x in b}
    assert len(groups) == 2 and all(20 <= len(x["prompt"]) <= 40 for x in b)
    obs = read_observation(tmp_path / "poisson.json")
    assert len(obs.completed) == 10 and obs.requests["send_s"].is_monotonic_increasing
    sc = scenario_from_dict({"model": "tiny-llama", "hardware": BASE_PROFILE, "scheduler": SCHEDULER,
                             "workload": {"arrival": {"process": "trace", "path": str(tmp_path / "poisson.json"),
                                                      "format": "observation"}}})
    r = simulate(sc).requests.sort_values("request_id")
    done = obs.completed
    np.testing.assert_allclose(r["arrival_time"], done["send_s"] - done["send_s"].iloc[0], atol=1e-9)
    assert (r["num_prompt_tokens"].to_numpy() == done["num_prompt_tokens"].to_numpy()).all()
    assert (r["num_output_tokens"].to_numpy() == done["num_output_tokens"].to_numpy()).all()

    # The fit's replay shares the run's prefixes (header: 16 tokens, 2 groups) in the prefix cache.
    sc = replay_scenario(obs, MODEL_PRESETS["tiny-llama"], BASE_PROFILE,
                         {"scheduler": {**SCHEDULER, "block_size": 16, "enable_prefix_caching": True}})
    assert sc.workload.prefix is not None and sc.workload.prefix.num_prefixes == 2
    assert simulate(sc).requests["num_cached_tokens"].max() == 16

    engine = FakeEngine(9)
    with engine.running():
        doc = observe(engine.url, Load("closed", 9, Lengths(8, 8), Lengths(2, 2), concurrency=3, timeout_s=60),
                      tmp_path / "closed.json", metrics=False)
    assert engine.max_in_flight <= 3 and len(engine.bodies) == 9 and doc["header"]["metrics_before"] is None
    assert all(r["error"] is None and r["output_tokens"] == 2 for r in doc["requests"])
    # The fit replays a closed loop as a loop of as many clients (sends follow the simulated ends).
    closed = read_observation(tmp_path / "closed.json")
    assert closed.closed_loop_clients() == 3 and obs.closed_loop_clients() is None
    sc = replay_scenario(closed, MODEL_PRESETS["tiny-llama"], BASE_PROFILE, {"scheduler": SCHEDULER})
    assert sc.workload.arrival.process == "closed_loop" and sc.workload.arrival.concurrency == 3
    r = simulate(sc).requests.sort_values("request_id")
    assert len(r) == 9 and (r["arrival_time"].iloc[:3] == 0).all() and (r["num_output_tokens"] == 2).all()
    ends = np.sort(r["finish_time"].to_numpy())[:6]
    assert (r["arrival_time"].iloc[3:].to_numpy() - ends < 1e-5).all()
    # vllm bench serve --max-concurrency 3 with no request rate is a closed loop; with a rate it is not
    bench = to_vllm_bench(tmp_path / "closed.json", tmp_path / "bench.json")
    for rate, clients in (("inf", 3), (20.0, None)):
        bench.write_text(json.dumps({**json.loads(bench.read_text()), "max_concurrency": 3, "request_rate": rate}))
        assert read_observation(bench).closed_loop_clients() == clients


def test_observe_warns_when_the_client_machine_is_busy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's load averages are recorded; above one per CPU at the start, a warning says the run
    may measure the client (docs/calibration.md, a client that falls behind)."""
    import calibrate.observe as observe_mod

    busy = [4.0 * (os.cpu_count() or 1), 1.0, 0.5]
    monkeypatch.setattr(observe_mod, "_load_average", lambda: busy)
    logged: list[str] = []
    engine = FakeEngine(2)
    with engine.running():
        doc = observe(engine.url, Load("offline", 2, Lengths(8, 8), Lengths(2, 2), timeout_s=60),
                      tmp_path / "busy.json", metrics=False, log=logged.append)
    assert doc["header"]["client"]["load_average_before"] == busy == doc["header"]["client"]["load_average_after"]
    warning = next(m for m in logged if m.startswith("warning: the client machine is busy (1-minute load average"))
    # the fake engine listens on 127.0.0.1: a server on this machine counts in its load average
    assert "the server runs on this machine and counts in it" in warning
    assert observe_mod._is_local("http://localhost:8000") and observe_mod._is_local("http://[::1]:8000/v1")
    assert not observe_mod._is_local("http://10.0.0.7:8000") and not observe_mod._is_local("https://api.example.com")


def test_observe_warns_when_the_client_machine_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pause the heartbeat saw (here: given to the watch) is written to the header and logged as a
    warning naming the run and the requests in flight across it."""
    import calibrate.observe as observe_mod

    real_stop = observe_mod.HostWatch.stop

    def stop(self: observe_mod.HostWatch) -> dict | None:
        got = real_stop(self)
        assert got is not None
        return {**got, "pauses": [[-0.5, 60.0]]}           # over the whole run
    monkeypatch.setattr(observe_mod.HostWatch, "stop", stop)
    logged: list[str] = []
    engine = FakeEngine(2)
    with engine.running():
        doc = observe(engine.url, Load("offline", 2, Lengths(8, 8), Lengths(2, 2), timeout_s=60),
                      tmp_path / "paused.json", metrics=False, log=logged.append)
    assert doc["header"]["client"]["host_pauses"]["pauses"] == [[-0.5, 60.0]]
    warned = [m for m in logged if m.startswith("warning: paused.json: the client's machine stopped 1 time(s)")]
    assert len(warned) == 1 and "the 2 requests in flight" in warned[0], logged


def test_an_offline_burst_fires_with_every_sender_ready(tmp_path: Path) -> None:
    """Every request of an offline burst has its thread started, and waiting, at the run's instant 0
    (the first clock reading): none is started mid-burst behind the streams already being read."""
    import time

    engine = FakeEngine(8)
    at_start: list[int] = []

    def clock() -> float:
        if not at_start:
            at_start.append(threading.active_count())
        return time.perf_counter()
    with engine.running():
        before = threading.active_count()
        doc = observe(engine.url, Load("offline", 8, Lengths(8, 8), Lengths(2, 2), timeout_s=60),
                      tmp_path / "burst.json", metrics=False, clock=clock)
    assert at_start[0] - before >= 8, (before, at_start)
    assert doc["header"]["requests_failed"] == 0 and len(engine.bodies) == 8


def test_observe_cli_and_its_errors(tmp_path: Path) -> None:
    engine = FakeEngine(4)
    out = tmp_path / "cli.json"
    with engine.running():
        proc = run_cli("observe", engine.url, "--out", str(out), "--offline", "--num-requests", "4",
                       "--prompt-tokens", "16", "--output-tokens", "2:3", "--no-min-tokens", "--text-prompts")
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and "4 requests to tiny" in proc.stdout
    assert len(read_observation(out).completed) == 4 and all("min_tokens" not in b for b in engine.bodies)
    assert all(isinstance(b["prompt"], str) and len(b["prompt"].split()) == 16 for b in engine.bodies)
    assert (read_observation(out).requests["num_prompt_tokens"] == 16).all()      # the server's usage
    cases = [(("--rate", "1", "--offline"), "--rate (Poisson)"),
             (("--offline", "--prompt-tokens", "0"), "--prompt-tokens = '0'"),
             (("--offline", "--prefix-tokens", "16"), "--prefix-tokens = 16: must be >= 0 and below the shortest"),
             (("--offline",), "cannot reach the server"),
             (("--offline", "--out", str(out / "x.json")), "cli.json is a file, not a folder; nothing was sent")]
    for extra, msg in cases:
        args = ["observe", "http://127.0.0.1:9", "--out", str(tmp_path / "x.json"), "--num-requests", "2",
                "--prompt-tokens", "16", "--output-tokens", "2", *extra]
        proc = run_cli(*args)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert msg in proc.stderr, proc.stderr


def test_observe_a_chat_endpoint(tmp_path: Path) -> None:
    """``--chat``: each prompt a user message of text at /v1/chat/completions; the prompt length is the
    server's count (its chat template included), a role-only first chunk is no token, and the run
    replays like any other."""
    from calibrate.observe import _chunk_text

    engine = FakeEngine(3)
    out = tmp_path / "chat.json"
    with engine.running():
        proc = run_cli("observe", engine.url, "--out", str(out), "--offline", "--num-requests", "3",
                       "--prompt-tokens", "12", "--output-tokens", "4", "--chat")
    assert proc.returncode == 0, proc.stderr
    assert all("messages" in b and "prompt" not in b and b["messages"][0]["role"] == "user"
               and len(b["messages"][0]["content"].split()) == 12 for b in engine.bodies)
    doc = json.loads(out.read_text())
    assert doc["header"]["load"]["api"] == "chat" and doc["header"]["load"]["text_prompts"] is True
    for r in doc["requests"]:
        assert r["prompt_tokens"] == 12 + CHAT_TEMPLATE_TOKENS and r["output_tokens"] == 4
        assert r["chunk_tokens"] == [1, 1, 1, 1] and r["first_token_s"] == r["chunk_s"][0]
    obs = read_observation(out)
    assert (obs.requests["num_prompt_tokens"] == 12 + CHAT_TEMPLATE_TOKENS).all()
    sc = replay_scenario(obs, MODEL_PRESETS["tiny-llama"], BASE_PROFILE, {"scheduler": SCHEDULER})
    assert len(simulate(sc).requests) == 3
    assert [_chunk_text(c) for c in ({"text": "a"}, {"delta": {"content": "b"}},
                                     {"delta": {"reasoning_content": "c"}}, {"delta": {"role": "assistant"}})] == \
        ["a", "b", "c", None]
    with pytest.raises(ScenarioError, match="--chat = True: a chat message is text"):
        Load("offline", 1, Lengths(8, 8), Lengths(2, 2), api="chat").check()


def test_observe_sends_an_api_key_from_the_environment_and_writes_it_nowhere(tmp_path: Path) -> None:
    """``--api-key-env VAR``: the key in VAR goes as ``Authorization: Bearer``; a server that wants one
    and gets none or another is a one-line error before any request is sent."""
    engine = FakeEngine(2, api_key="sk-test-123")
    out = tmp_path / "auth.json"
    common = ("observe", engine.url, "--out", str(out), "--offline", "--num-requests", "2", "--prompt-tokens", "8",
              "--output-tokens", "2")
    with engine.running():
        cases = [((), {}, "--api-key-env = None: the server answered HTTP 401 at /v1/models: it wants an API key"),
                 (("--api-key-env", "OBS_KEY"), {"OBS_KEY": "sk-wrong"}, "it refused the key"),
                 (("--api-key-env", "OBS_KEY"), {"OBS_KEY": " "}, "--api-key-env = 'OBS_KEY': no such environment "
                                                                  "variable, or it is empty")]
        for extra, env, msg in cases:
            proc = run_cli(*common, *extra, **env)
            assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
            assert msg in proc.stderr and "sk-" not in proc.stderr, proc.stderr
        assert engine.bodies == [] and not out.exists()
        proc = run_cli(*common, "--api-key-env", "OBS_KEY", OBS_KEY="sk-test-123")
    assert proc.returncode == 0, proc.stderr
    assert len(engine.bodies) == 2 and len(read_observation(out).completed) == 2
    assert "sk-test" not in out.read_text()


def test_observe_takes_lengths_and_instants_from_a_trace(tmp_path: Path) -> None:
    """``--lengths-from``: each request's lengths from a trace, in its order, under any load;
    ``--replay``: its send instants too. The header names the trace (path, format, sha256); the
    replay reads the observed instants, and bad combinations are one-line errors."""
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,prompt_tokens,output_tokens\n0.0,12,3\n0.05,20,2\n0.1,9,4\n0.3,15,2\n")
    engine = FakeEngine(6)
    with engine.running():
        lengths = run_cli("observe", engine.url, "--out", str(tmp_path / "l.json"), "--offline", "--num-requests",
                          "3", "--lengths-from", str(trace), "--no-min-tokens")
        replay = run_cli("observe", engine.url, "--out", str(tmp_path / "r.json"), "--replay", str(trace),
                         "--num-requests", "3", "--no-min-tokens")
    assert lengths.returncode == 0 and replay.returncode == 0, lengths.stderr + replay.stderr
    assert sorted(len(b["prompt"]) for b in engine.bodies[:3]) == [9, 12, 20]        # an offline burst: any order
    assert [(len(b["prompt"]), b["max_tokens"]) for b in engine.bodies[3:]] == [(12, 3), (20, 2), (9, 4)]
    for name, arrival in (("l.json", "offline"), ("r.json", "trace")):
        doc = json.loads((tmp_path / name).read_text())
        load = doc["header"]["load"]
        assert load["arrival"] == arrival and load["prompt_tokens"] == "9:20" and load["output_tokens"] == "2:4"
        assert load["trace"]["path"] == str(trace) and load["trace"]["arrivals"] is (arrival == "trace")
        assert len(load["trace"]["sha256"]) == 64 and [r["prompt_tokens"] for r in doc["requests"]] == [12, 20, 9]
    sends = [r["send_s"] for r in json.loads((tmp_path / "r.json").read_text())["requests"]]
    assert sends[0] >= 0 and sends[1] >= 0.05 and sends[2] >= 0.1     # the trace's instants from t0, or later
    assert read_observation(tmp_path / "r.json").closed_loop_clients() is None
    for extra, msg in [(("--offline", "--lengths-from", str(trace), "--prompt-tokens", "8"),
                        "--prompt-tokens = '8': the lengths come from"),
                       (("--offline",), "--prompt-tokens = None: give --prompt-tokens and --output-tokens, or take"),
                       (("--replay", str(trace), "--rate", "2"), "give exactly one of --rate"),
                       (("--replay", str(trace), "--lengths-from", str(trace)), "--replay takes the lengths"),
                       (("--replay", str(trace), "--num-requests", "9"), "--num-requests = 9: the trace"),
                       (("--replay", str(tmp_path / "none.csv")), "trace file not found"),
                       (("--replay", str(trace), "--trace-format", "vidur"), "vidur")]:
        args = ["observe", "http://127.0.0.1:9", "--out", str(tmp_path / "x.json"), *extra]
        if "--num-requests" not in extra:
            args += ["--num-requests", "2"]
        proc = run_cli(*args)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert msg in proc.stderr, proc.stderr


def test_a_run_where_every_request_failed_says_why(tmp_path: Path) -> None:
    """Every request refused (here HTTP 400; on the real vLLM, prompt token ids outside its vocabulary):
    the error quotes the first request's failure, where it said only that none completed; the file
    keeps every request's error."""
    engine = FakeEngine(2, fail_every=1)
    out = tmp_path / "failed.json"
    with engine.running():
        proc = run_cli("observe", engine.url, "--out", str(out), "--offline", "--num-requests", "2",
                       "--prompt-tokens", "8", "--output-tokens", "2")
    last = proc.stderr.strip().splitlines()[-1]      # after the progress line
    assert proc.returncode == 2 and last.startswith("error: URL = "), proc.stderr
    assert "none of the 2 requests completed" in last and "first failed with: HTTP 400" in last
    assert [r["error"][:8] for r in json.loads(out.read_text())["requests"]] == ["HTTP 400"] * 2


def test_observation_files_are_checked_with_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    for text, msg in [("{", "not JSON"), ("[1, 2]", "neither an `llmplan observe` file"),
                      (json.dumps({"ttfts": [0.1], "input_lens": [3], "output_lens": [2], "itls": [[0.1]]}),
                       "start_times"),
                      (json.dumps({"format": "llmplan-observation", "version": 1, "header": {},
                                   "requests": [{"send_s": 1.0, "prompt_tokens": 4, "output_tokens": 2,
                                                 "first_token_s": 0.5, "end_s": 2.0}]}), "must be in this order")]:
        bad.write_text(text)
        with pytest.raises(ScenarioError, match=msg):
            read_observation(bad)
    with pytest.raises(ScenarioError, match="observation file not found"):
        read_observation(tmp_path / "missing.json")
    sc = scenario_from_dict({"model": "tiny-llama", "hardware": BASE_PROFILE, "scheduler": SCHEDULER,
                             "workload": {"arrival": {"process": "trace", "path": str(bad), "format": "observation"}}})
    with pytest.raises(ScenarioError, match="must be in this order"):
        simulate(sc)
    assert parse_metrics('a 1\nvllm:num_requests_waiting{x="y"} 3\n# c\nvllm:num_preemptions_total NaNx') == \
        {'vllm:num_requests_waiting{x="y"}': 3.0}
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"format": "llmplan-observation", "version": 1, "header": {},
                                "requests": [{"send_s": 0.0, "prompt_tokens": 4, "output_tokens": 2,
                                              "first_token_s": 0.5, "end_s": 2.0}]}))
    read_observation(good)
    for args, msg in [(("--holdout", str(bad)), "--holdout = "),
                      (("--from-observation", str(bad), "--quick"), "--quick = True: times torch kernels; it does "
                                                                    "not apply to --from-observation"),
                      (("--from-observation", str(bad), "--fit", "step_s,warp"), "--fit = 'step_s,warp'"),
                      (("--from-observation", str(bad), "--model", "gpt-9"), "unknown model preset"),
                      (("--from-observation", str(bad)), "must be in this order"),
                      (("--engine", "vllm-v1"), "--engine = 'vllm-v1': applies to a fit"),
                      (("--from-observation", str(good), "--hardware", BASE_PROFILE, "--engine", "sglangx"),
                       "--engine = 'sglangx': unknown engine preset; known: vllm-v1")]:
        proc = run_cli("calibrate", *args, "--out", str(tmp_path / "o"))
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert msg in proc.stderr, proc.stderr


@pytest.mark.parametrize(("profile", "model"), [(BASE_PROFILE, "tiny-llama"), ("h100-sxm", "llama-3-8b"),
                                                ("h100-sxm-datasheet", "llama-3-8b"), ("constant", "tiny-llama")])
def test_kernel_scale_is_one_factor_on_every_kernel_time_of_any_profile(tmp_path: Path, profile: str,
                                                                        model: str) -> None:
    """``kernel_scale`` multiplies the step time of any batch by exactly that factor (overhead
    apart), whatever the cost model: a measured table, an imported kernel table, a roofline, a constant."""
    from simulator.cost.base import BatchShape
    from simulator.cost.factory import make_cost_model

    base = load_profile({"cost_model": "constant", "step_time_s": 0.01, "prefill_time_per_token_s": 1e-5}
                        if profile == "constant" else profile)
    shapes = [BatchShape.decode(1, 100), BatchShape.decode(64, 1000), BatchShape.prefill(512),
              BatchShape.prefill(2048, 1024)]
    times = []
    for scale in (1.0, 0.37):
        data = scaled_profile(base, {"step_s": 0.0, "per_seq_s": 0.0, "kernel_scale": scale}, tmp_path)
        data["overhead"]["per_token_s"] = 0.0
        cost = make_cost_model(load_profile(data), MODEL_PRESETS[model], 1)
        times.append(np.array([cost.step_time_s(s) for s in shapes]))
    np.testing.assert_allclose(times[1] / times[0], 0.37, rtol=1e-4)


def test_nelder_mead_is_deterministic_and_finds_a_minimum() -> None:
    f = lambda z: float((z[0] - 1.0) ** 2 + 10 * (z[1] + 0.5) ** 2)  # noqa: E731
    a, fa, n = nelder_mead(f, np.zeros(2), max_evals=200)
    b, fb, m = nelder_mead(f, np.zeros(2), max_evals=200)
    assert (a == b).all() and fa == fb and n == m <= 200
    np.testing.assert_allclose(a, [1.0, -0.5], atol=2e-3)


def _observation(arrival: str, ttft: list[float], tpot: list[float]) -> Observation:
    n = len(ttft)
    req = pd.DataFrame({"send_s": np.linspace(0.0, 0.1, n), "num_prompt_tokens": 100, "num_output_tokens": 11,
                        "ttft_s": ttft, "e2e_s": np.add(ttft, np.multiply(tpot, 10)), "tpot_s": tpot, "ok": True})
    return Observation("run.json", "llmplan observe", {"load": {"arrival": arrival}}, req, [[]] * n)


def test_a_burst_is_compared_by_rank_and_any_other_load_request_by_request() -> None:
    """A server takes a burst's requests in the order its front end reads them, not their send order
    (docs/fidelity.md: rank correlation 0.64-0.80 on a real vLLM): a replay that serves them in send
    order and matches the observed times exactly as a set has no error in a burst; in a Poisson run
    the same replay is wrong request by request."""
    observed_ttft, observed_tpot = [3.0, 1.0, 4.0, 2.0], [0.02, 0.04, 0.01, 0.03]
    sim = pd.DataFrame({"ttft_s": [1.0, 2.0, 3.0, 4.0], "tpot_s": [0.01, 0.02, 0.03, 0.04],
                        "arrival_time": np.linspace(0.0, 0.1, 4)})
    sim["e2e_s"] = sim["ttft_s"] + 10 * sim["tpot_s"]
    burst = _observation("offline", observed_ttft, observed_tpot)
    assert burst.burst()
    np.testing.assert_allclose(_residuals(sim, burst), 0.0, atol=1e-12)
    assert errors(sim, burst)["request_median_abs_log_ratio"] == pytest.approx(0.0, abs=1e-12)
    poisson = _observation("poisson", observed_ttft, observed_tpot)
    assert not poisson.burst()
    r = _residuals(sim, poisson)
    np.testing.assert_allclose(r[:4], np.log(np.array([1.0, 2.0, 3.0, 4.0]) / observed_ttft))
    # a request the replay has no value for costs the clip in either mode, whatever its rank
    gap = sim.assign(tpot_s=[0.01, np.nan, 0.03, 0.04])
    assert sorted(np.abs(_residuals(gap, burst)[4:]))[-1] == pytest.approx(CLIP)
    closed = Observation("c.json", "llmplan observe", {"load": {"arrival": "closed", "concurrency": 2}},
                         poisson.requests, [[]] * 4)
    assert not closed.burst()


def test_runs_of_the_same_name_in_different_folders_are_told_apart() -> None:
    """Repeats kept in folders of their own (rep0/offline.json, rep1/offline.json) are reported under names
    that tell them apart; a run whose file name is unique keeps the name alone."""
    names = run_names(["/w/rep0/offline.json", "/w/rep1/offline.json", "/w/rep0/rate-0.6.json",
                       "/v/rep0/offline.json"])
    assert names == {"/w/rep0/offline.json": "w/rep0/offline.json", "/w/rep1/offline.json": "rep1/offline.json",
                     "/w/rep0/rate-0.6.json": "rate-0.6.json", "/v/rep0/offline.json": "v/rep0/offline.json"}
    doc = {"parameters": {"step_s": 0.002}, "profile": "out/profile.yaml",
           "fit_error": {"/w/rep0/offline.json": dict.fromkeys(("ttft_p50", "tpot_p50", "e2e_p50", "e2e_p90",
                                                                "throughput"), 0.01)},
           "holdout_error": {"/w/rep1/offline.json": dict.fromkeys(("ttft_p50", "tpot_p50", "e2e_p50", "e2e_p90",
                                                                    "throughput"), -0.02)}}
    lines = format_report(doc)
    assert "fit      rep0/offline.json: ttft p50 +1.0%" in lines[1]
    assert "held out rep1/offline.json: ttft p50 -2.0%" in lines[2]


def test_the_servers_counters_are_set_beside_the_replays_and_a_gap_is_named() -> None:
    """A replay that hits the prefix cache and preempts as the server did passes silently; one whose
    engine settings are not the server's (prefix caching off, a larger KV cache) is named with the
    settings to check."""
    delta = {'vllm:prefix_cache_hits_total{model_name="m"}': 97536.0,
             'vllm:external_prefix_cache_hits_total{model_name="m"}': 5.0,     # another counter, not summed in
             'vllm:num_preemptions_total{model_name="m",engine="0"}': 50.0,
             'vllm:num_preemptions_total{model_name="m",engine="1"}': 32.0}
    obs = Observation("run.json", "llmplan observe", {"metrics_delta": delta}, pd.DataFrame(), [])
    assert obs.counter("prefix_cache_hits_total") == 97536.0 and obs.counter("num_preemptions_total") == 82.0
    assert obs.counter("num_requests_waiting") is None
    assert Observation("r.json", "vllm bench serve", {}, pd.DataFrame(), []).counter("num_preemptions_total") is None
    same = pd.DataFrame({"num_cached_tokens": [97536 // 2] * 2, "num_preemptions": [40, 30]})
    c = server_counters(same, obs, "run.json")
    assert c["warnings"] == [] and c["prefix_cache_hit_tokens"] == {"server": 97536.0, "replay": 97536.0}
    assert c["preemptions"] == {"server": 82.0, "replay": 70.0}          # 15% apart: a real vLLM's repeats
    other = pd.DataFrame({"num_cached_tokens": [0, 0], "num_preemptions": [0, 0]})
    w = server_counters(other, obs, "run.json")["warnings"]
    assert len(w) == 2 and "run.json: the server's prefix cache hit 97,536 prompt tokens, the replay's 0" in w[0]
    assert "enable_prefix_caching" in w[0] and "the server preempted 82 times, the replay 0" in w[1]
    assert server_counters(other, Observation("r.json", "vllm bench serve", {}, pd.DataFrame(), []), "r") == \
        {"warnings": []}


def test_a_profile_says_what_its_costs_rest_on() -> None:
    """``HardwareProfile.basis``, which a plan's assumptions and printout quote for each candidate: a
    fitted profile names the engine it was fitted to and its held-out error."""
    assert load_profile("h100-sxm-datasheet").basis().startswith("datasheet: vendor peak FLOP/s")
    assert load_profile(BASE_PROFILE).basis().startswith("measured: torch kernels timed on the device (a serving "
                                                           "engine's own kernels and CPU time differ")
    assert "AIConfigurator" in load_profile("h100-sxm").basis()
    fitted = load_profile(str(Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "vllm-cpu-profile"))
    assert fitted.basis() == ("fitted to vllm-v1 0.32.0's observed runs (6); held-out median |error|: ttft p50 8%, "
                              "tpot p50 6%, throughput 0%; leaving out one run moves frontend_s by up to 46%")
    loo = {"costs": {"step_s": {"value": 2e-3, "min": 1.6e-3, "max": 2.1e-3, "jackknife_se_log": 0.1},
                     "kernel_scale": {"value": 1.0, "min": 0.9, "max": 1.1, "jackknife_se_log": 0.05}}}
    refit = fitted.model_copy(update={"provenance": {**fitted.provenance, "leave_one_out": loo}})
    assert "leave_one_out" in fitted.provenance
    assert refit.basis().endswith("; leaving out one run moves step_s by up to 25%")      # 2 / 1.6 - 1
