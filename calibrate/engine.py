"""A small but real LLM serving engine in torch: the ground truth the simulator is validated against.

* **Model** (:class:`LlamaModel`): a Llama-architecture decoder with random weights at any
  :class:`~simulator.scenario.models.ModelSpec` size: token embedding, per layer RMSNorm, fused QKV
  projection, rotary embeddings, grouped-query attention (``scaled_dot_product_attention``), O
  projection, residual, RMSNorm, fused gate/up projection, SiLU-and-multiply, down projection,
  residual; final RMSNorm, LM head on the rows that sample, greedy sampling (argmax). Timing
  does not depend on the weights' values, and no weights can be downloaded here.
* **KV cache**: one contiguous ``(layers, 2, kv_heads, prompt + max_tokens, head_dim)`` tensor per
  running request, allocated at admission and dropped at finish or preemption (recompute).
  Attention runs per request over its own cached keys: the prefill chunk with a bottom-right
  causal mask after its cached context, a decode token unmasked.
* **Scheduler**: the simulator's own policy classes (:data:`simulator.engine.policies.POLICIES`,
  ``continuous`` and ``chunked_prefill``) make every decision, with the same
  ``max_num_seqs``, ``max_num_batched_tokens``, block accounting and preemption; the engine runs
  the real kernels for each planned step and reports the step's end as ``now``. The scheduler
  writes arrival, first-token and finish instants into the same :class:`RequestTable` the
  simulator uses, so both sides' records go through the same metrics code.
* **Load generator** (:meth:`ServingEngine.run`): requests arrive at the workload's instants
  (drawn by the simulator's own workload code from the scenario and seed); the engine admits
  them at step boundaries, like vLLM's busy loop, and sleeps when idle.

Clocks: ``wall`` is the real wall clock (``time.perf_counter``), the truth on a dedicated
machine. ``thread`` runs the same engine but advances its clock by the thread CPU time each step
consumed (``time.thread_time``) and jumps idle gaps to the next arrival: what the engine would
show on a dedicated core, immune to time-slicing by other processes on a shared machine (it still
sees their cache and memory-bandwidth pressure). Use ``wall`` wherever the machine is quiet.

This module imports torch; the ``simulator`` package never imports it.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from simulator.cost.base import BatchShape
from simulator.engine.kv_cache import KVCacheManager
from simulator.engine.policies import POLICIES
from simulator.engine.request import RequestTable
from simulator.engine.scheduler import SchedulerOutput
from simulator.scenario.config import Scenario
from simulator.scenario.models import ModelSpec
from simulator.workload.traffic import Workload

from .kernels import TORCH_DTYPES

ENGINE_POLICIES = ("continuous", "chunked_prefill")
CLOCKS = ("wall", "thread")


class LlamaModel:
    """Random-weight Llama decoder (see module docstring); ``forward`` runs one engine step."""

    def __init__(self, spec: ModelSpec, *, device: str | torch.device = "cpu", dtype: str | None = None,
                 seed: int = 0) -> None:
        if spec.beyond_dense:
            from simulator.errors import ScenarioError
            raise ScenarioError("model", spec.name, f"has {', '.join(spec.beyond_dense)}: the reference engine "
                                "builds dense Llama-shaped models only")
        self.spec = spec
        self.device = torch.device(device)
        self.dtype = TORCH_DTYPES[dtype or ("fp32" if self.device.type == "cpu" else "bf16")]
        # Weights are drawn where they live (a GPU draws an 8B model's in a second; the CPU would
        # take a minute); timing does not depend on their values.
        gen_device = self.device if self.device.type == "cuda" else torch.device("cpu")
        g = torch.Generator(device=gen_device).manual_seed(seed)
        h, d = spec.hidden_size, spec.head_dim
        self.h, self.d = h, d
        self.H, self.Hkv = spec.num_attention_heads, spec.num_key_value_heads
        self.q_w, self.kv_w = self.H * d, self.Hkv * d
        inter = spec.intermediate_size
        self.inter = inter

        def w(n: int, k: int) -> torch.Tensor:
            t = torch.randn(n, k, generator=g, dtype=torch.float32, device=gen_device) * (1.0 / math.sqrt(k))
            return t.to(device=self.device, dtype=self.dtype)

        self.embed = w(spec.vocab_size, h)
        self.layers = []
        for _ in range(spec.num_layers):
            self.layers.append({
                "attn_norm": torch.ones(h, device=self.device, dtype=self.dtype),
                "qkv": w(self.q_w + 2 * self.kv_w, h), "o": w(h, self.q_w),
                "mlp_norm": torch.ones(h, device=self.device, dtype=self.dtype),
                "gate_up": w(2 * inter, h), "down": w(h, inter)})
        self.final_norm = torch.ones(h, device=self.device, dtype=self.dtype)
        self.lm_head = w(spec.vocab_size, h)
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        ang = torch.outer(torch.arange(spec.max_model_len, dtype=torch.float32), inv)
        self.cos = torch.cat([ang.cos(), ang.cos()], -1).to(device=self.device, dtype=self.dtype)
        self.sin = torch.cat([ang.sin(), ang.sin()], -1).to(device=self.device, dtype=self.dtype)
        self.eps = 1e-5

    def new_cache(self, num_tokens: int) -> torch.Tensor:
        """A request's KV cache: ``(layers, 2, kv_heads, num_tokens, head_dim)``."""
        return torch.empty(self.spec.num_layers, 2, self.Hkv, num_tokens, self.d, device=self.device,
                           dtype=self.dtype)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = self.d // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, segments: list[tuple[torch.Tensor, int, int]],
                sample_rows: list[int], return_logits: bool = False) -> torch.Tensor:
        """One step over the concatenated new tokens of every scheduled request.

        Args:
            tokens: ``(T,)`` token ids, each request's new tokens contiguous.
            segments: per request ``(kv_cache, start, length)``: its tokens are rows
                ``[offset, offset + length)`` of ``tokens`` (in order) at positions
                ``start .. start + length - 1``.
            sample_rows: rows of ``tokens`` whose next token is sampled (a segment's last row).

        Returns:
            ``(len(sample_rows),)`` greedy next tokens (their fp32 logits with ``return_logits``).
        """
        pos = torch.cat([torch.arange(s, s + n) for _, s, n in segments]).to(self.device)
        cos, sin = self.cos[pos][:, None, :], self.sin[pos][:, None, :]
        x = self.embed[tokens.to(self.device)]
        T = x.shape[0]
        H, Hkv, d, qw, kvw = self.H, self.Hkv, self.d, self.q_w, self.kv_w
        gqa = Hkv != H
        from torch.nn.attention.bias import causal_lower_right
        for li, layer in enumerate(self.layers):
            xn = F.rms_norm(x, (self.h,), layer["attn_norm"], self.eps)
            qkv = F.linear(xn, layer["qkv"])
            q = self._rotate(qkv[:, :qw].view(T, H, d), cos, sin)
            k = self._rotate(qkv[:, qw:qw + kvw].view(T, Hkv, d), cos, sin)
            v = qkv[:, qw + kvw:].view(T, Hkv, d)
            outs = []
            off = 0
            for cache, start, n in segments:
                end = start + n
                kc, vc = cache[li, 0], cache[li, 1]            # (Hkv, tokens, d)
                kc[:, start:end] = k[off:off + n].transpose(0, 1)
                vc[:, start:end] = v[off:off + n].transpose(0, 1)
                qs = q[off:off + n].transpose(0, 1).unsqueeze(0)  # (1, H, n, d)
                ks, vs = kc[:, :end].unsqueeze(0), vc[:, :end].unsqueeze(0)
                if n == 1:
                    o = F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=gqa)
                elif start == 0:
                    o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=gqa)
                else:
                    o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=causal_lower_right(n, end),
                                                       enable_gqa=gqa)
                outs.append(o[0].transpose(0, 1).reshape(n, qw))
                off += n
            attn = outs[0] if len(outs) == 1 else torch.cat(outs)
            x = x + F.linear(attn, layer["o"])
            xn = F.rms_norm(x, (self.h,), layer["mlp_norm"], self.eps)
            gu = F.linear(xn, layer["gate_up"])
            x = x + F.linear(F.silu(gu[:, :self.inter]) * gu[:, self.inter:], layer["down"])
        if not sample_rows:                      # only partial prefill chunks: nothing is sampled
            return torch.zeros(0, dtype=torch.long)
        last = x[torch.as_tensor(sample_rows, dtype=torch.long, device=self.device)]
        logits = F.linear(F.rms_norm(last, (self.h,), self.final_norm, self.eps), self.lm_head).float()
        if not torch.isfinite(logits).all():
            raise FloatingPointError("non-finite logits")
        if return_logits:
            return logits.cpu()
        return logits.argmax(dim=-1).cpu()


@dataclass
class StepRecord:
    """One engine step as run: its plan and its measured durations."""

    start_s: float
    duration_s: float
    """On the engine's clock (wall or thread)."""
    wall_s: float
    cpu_s: float
    num_decode: int
    decode_context_sum: int
    prefill_tokens: list[int]
    prefill_context: list[int]
    num_sampled: int
    num_waiting: int

    def batch_shape(self) -> BatchShape:
        """The step's plan as the cost model's input."""
        return BatchShape(self.prefill_tokens, self.prefill_context, self.num_decode, self.decode_context_sum,
                          self.num_sampled)


@dataclass
class EngineRun:
    """What one engine run measured."""

    table: RequestTable
    steps: list[StepRecord]
    token_times: list[list[float]]
    """Per request, the instant of every emitted token (engine clock, seconds from the start)."""
    outputs: list[list[int]]
    """Per request, the generated token ids."""
    clock: str
    wall_s: float
    engine_steps_cpu_s: float = 0.0
    scenario: Scenario | None = None

    def requests_frame(self) -> Any:
        """One row per request, built by the simulator's own code (same columns as ``result.requests``)."""
        from simulator.run.records import request_columns
        assert self.scenario is not None
        return request_columns(self.table, self.scenario).to_frame()

    def steps_frame(self) -> Any:
        import pandas as pd
        return pd.DataFrame([{
            "start_s": s.start_s, "duration_s": s.duration_s, "wall_s": s.wall_s, "cpu_s": s.cpu_s,
            "num_decode": s.num_decode, "decode_context_sum": s.decode_context_sum,
            "num_prefill_tokens": sum(s.prefill_tokens), "num_prefills": len(s.prefill_tokens),
            "num_sampled": s.num_sampled, "num_waiting": s.num_waiting} for s in self.steps])


@dataclass
class _Seq:
    tokens: list[int]
    total: int
    cache: torch.Tensor | None = None
    computed: int = 0
    out: list[int] = field(default_factory=list)


class ServingEngine:
    """Continuous-batching engine over :class:`LlamaModel` driven by the simulator's scheduler.

    Args:
        scenario: supplies ``scheduler`` (policy and knobs) and the model size.
        model: the decoder to run (its spec should be the scenario's model).
        num_gpu_blocks: KV blocks the scheduler accounts (the simulator's plan for the same
            scenario, so both sides admit and preempt alike).
        max_model_len: longest prompt + output.
        clock: ``wall`` or ``thread`` (see module docstring).
    """

    def __init__(self, scenario: Scenario, model: LlamaModel, num_gpu_blocks: int, *, clock: str = "wall",
                 seed: int = 0) -> None:
        cfg = scenario.scheduler
        if cfg.policy not in ENGINE_POLICIES:
            from simulator.errors import ScenarioError
            raise ScenarioError("scheduler.policy", cfg.policy,
                                f"the reference engine runs {', '.join(ENGINE_POLICIES)}")
        if scenario.speculative_config is not None:
            from simulator.errors import ScenarioError
            raise ScenarioError("speculative_config", scenario.speculative_config.method,
                                "the reference engine does not run speculative decoding")
        if clock not in CLOCKS:
            from simulator.errors import ScenarioError
            raise ScenarioError("clock", clock, f"allowed: {', '.join(CLOCKS)}")
        if cfg.enable_prefix_caching or cfg.preemption_mode != "recompute" or scenario.workload.tiers:
            from simulator.errors import ScenarioError
            raise ScenarioError("scheduler", cfg.policy, "the reference engine runs without prefix caching, swap "
                                "preemption or request tiers")
        self.scenario = scenario
        self.config = cfg
        self.model = model
        self.num_gpu_blocks = num_gpu_blocks
        self.clock = clock
        self.seed = seed

    def warmup(self, steps: int = 3) -> None:
        """Run a few throw-away steps (first-call costs: allocator, kernel selection)."""
        m = self.model
        for n in (1, 2, 8, 32):
            caches = [m.new_cache(64) for _ in range(n)]
            for _ in range(steps):
                segs = [(c, 0, 16) for c in caches]
                m.forward(torch.zeros(16 * n, dtype=torch.long), segs, [16 * i + 15 for i in range(n)])
                segs = [(c, 16, 1) for c in caches]
                m.forward(torch.zeros(n, dtype=torch.long), segs, list(range(n)))

    def run(self, workload: Workload, *, on_step: Callable[[int, int], None] | None = None,
            max_wall_s: float | None = None) -> EngineRun:
        """Serve every request of ``workload`` (arrivals in real or thread-clock time)."""
        cfg = self.config
        table = RequestTable(workload)
        kv = KVCacheManager(self.num_gpu_blocks, cfg.block_size)
        sched = POLICIES[cfg.policy](cfg, kv, table)
        rng = np.random.default_rng(self.seed)
        vocab = self.model.spec.vocab_size
        seqs = [_Seq(rng.integers(0, vocab, int(p)).tolist(), int(p) + int(o))
                for p, o in zip(workload.num_prompt_tokens, workload.max_tokens, strict=True)]
        token_times: list[list[float]] = [[] for _ in seqs]
        arrivals = workload.arrival_time
        rejected = workload.rejected
        n_req = len(seqs)
        steps: list[StepRecord] = []
        next_arrival = 0
        done = int(rejected.sum())
        for rid in np.flatnonzero(rejected).tolist():
            table.status[rid] = 5   # FINISHED_REJECTED
        thread_clock = self.clock == "thread"
        wall0 = time.perf_counter()
        now = 0.0                       # engine clock, seconds since the start
        busy_cpu = 0.0
        while done < n_req:
            if not thread_clock:
                now = time.perf_counter() - wall0
            while next_arrival < n_req and arrivals[next_arrival] <= now:
                if not rejected[next_arrival]:
                    sched.add_request(next_arrival)
                next_arrival += 1
            if sched.n == 0 and not sched.waiting:
                if next_arrival >= n_req:
                    break
                t_next = float(arrivals[next_arrival])
                if thread_clock:
                    now = t_next
                else:
                    delay = t_next - (time.perf_counter() - wall0)
                    if delay > 0:
                        time.sleep(delay)
                continue
            out = sched.schedule(now)
            if out.num_decode == 0 and not out.admitted:
                raise RuntimeError("scheduler planned an empty step (a waiting request can never fit)")
            for rid in out.preempted:               # recompute preemption: drop the KV cache
                s = seqs[rid]
                s.cache, s.computed = None, 0
            w0, c0 = time.perf_counter(), time.thread_time()
            emitted, record = self._execute(out, seqs)
            w1, c1 = time.perf_counter(), time.thread_time()
            dur = (c1 - c0) if thread_clock else (w1 - w0)
            end = now + dur if thread_clock else w1 - wall0
            busy_cpu += c1 - c0
            finished = sched.update_from_output(out, end)
            for rid in emitted:
                token_times[rid].append(end)
            for rid in finished:
                seqs[int(rid)].cache = None
            done += len(finished)
            record.start_s, record.duration_s, record.wall_s, record.cpu_s = now, dur, w1 - w0, c1 - c0
            record.num_waiting = len(sched.waiting)
            steps.append(record)
            if thread_clock:
                now = end
            if on_step is not None:
                on_step(done, n_req)
            if max_wall_s is not None and time.perf_counter() - wall0 > max_wall_s:
                raise TimeoutError(f"engine run exceeded {max_wall_s:.0f} s of wall time")
        return EngineRun(table, steps, token_times, [s.out for s in seqs], self.clock,
                         time.perf_counter() - wall0, busy_cpu, self.scenario)

    def _execute(self, out: SchedulerOutput, seqs: list[_Seq]) -> tuple[list[int], StepRecord]:
        """Run the forward pass for one planned step; returns the requests that emitted a token."""
        segments: list[tuple[torch.Tensor, int, int]] = []
        ids: list[int] = []
        toks: list[int] = []
        sample_rows: list[int] = []
        emit: list[int] = []
        row = 0
        dec_ctx = 0
        decode_ids = out.decoding_ids()
        for rid in decode_ids:
            rid = int(rid)
            s = seqs[rid]
            assert s.cache is not None   # a running request has its cache
            segments.append((s.cache, s.computed, 1))
            toks.append(s.tokens[s.computed])
            dec_ctx += s.computed + 1
            sample_rows.append(row)
            emit.append(rid)
            row += 1
        context = out.prefill_context if out.prefill_context is not None else [0] * len(out.admitted)
        for rid, n, ctx in zip(out.admitted, out.admitted_tokens, context, strict=True):
            s = seqs[rid]
            if s.cache is None:
                s.cache = self.model.new_cache(s.total)
            if s.computed != ctx:
                raise RuntimeError(f"request {rid}: engine has {s.computed} cached tokens, scheduler says {ctx}")
            segments.append((s.cache, s.computed, n))
            toks.extend(s.tokens[s.computed:s.computed + n])
            row += n
            if s.computed + n == len(s.tokens):      # the prompt (or recomputed prefix) completes
                sample_rows.append(row - 1)
                emit.append(rid)
            ids.append(rid)
        new = self.model.forward(torch.as_tensor(toks, dtype=torch.long), segments, sample_rows).tolist()
        for rid in decode_ids:
            seqs[int(rid)].computed += 1
        for rid, n in zip(out.admitted, out.admitted_tokens, strict=True):
            seqs[rid].computed += n
        for rid, t in zip(emit, new, strict=True):
            s = seqs[rid]
            s.tokens.append(int(t))
            s.out.append(int(t))
        record = StepRecord(0.0, 0.0, 0.0, 0.0, len(decode_ids), dec_ctx, list(out.admitted_tokens),
                            list(context), len(emit), 0)
        return emit, record
