"""What every cost model provides: its input (BatchShape), the step-time breakdown, the protocol,
the registry."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import numpy as np

from simulator.registry import Registry


@dataclass(frozen=True, slots=True)
class StepTime:
    """One step's time, broken down (seconds)."""

    linear_s: float = 0.0
    attention_s: float = 0.0
    elementwise_s: float = 0.0
    comm_s: float = 0.0
    overhead_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.linear_s + self.attention_s + self.elementwise_s + self.comm_s + self.overhead_s


class BatchShape:
    """What one engine step computes: the cost model's input (vLLM's scheduled tokens, reduced).

    Prefill entry ``i`` computes ``prefill_tokens[i]`` new tokens on top of
    ``prefill_computed_tokens[i]`` tokens whose KV is already cached (its ``num_computed_tokens``:
    a previous chunk, a prefix-cache hit, or a swapped-in request's context); ``num_decodes``
    requests decode one token each, attending over ``decode_context_tokens`` tokens in total
    (their cached tokens plus the new one); ``num_sampled_tokens`` rows go through the LM head
    (decodes plus prefills that finish their prompt; every verified position under speculative
    decoding). The two lists are the caller's, not copied: they must not change while the shape
    is in use. A shape is not changed once built: its attributes are ``Final`` (mypy refuses an
    assignment; the compiled engine has no setter for them). A plain class rather than a frozen
    dataclass: the compiled engine builds one per step, and a dataclass's generated ``__init__``
    would run as Python there.
    """

    def __init__(self, prefill_tokens: Sequence[int] = (), prefill_computed_tokens: Sequence[int] = (),
                 num_decodes: int = 0, decode_context_tokens: int = 0, num_sampled_tokens: int = 0) -> None:
        self.prefill_tokens: Final = prefill_tokens
        self.prefill_computed_tokens: Final = prefill_computed_tokens
        self.num_decodes: Final = num_decodes
        self.decode_context_tokens: Final = decode_context_tokens
        self.num_sampled_tokens: Final = num_sampled_tokens

    def _key(self) -> tuple[tuple[int, ...], tuple[int, ...], int, int, int]:
        return (tuple(self.prefill_tokens), tuple(self.prefill_computed_tokens), self.num_decodes,
                self.decode_context_tokens, self.num_sampled_tokens)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BatchShape) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"BatchShape(prefill_tokens={list(self.prefill_tokens)}, "
                f"prefill_computed_tokens={list(self.prefill_computed_tokens)}, num_decodes={self.num_decodes}, "
                f"decode_context_tokens={self.decode_context_tokens}, num_sampled_tokens={self.num_sampled_tokens})")

    @classmethod
    def decode(cls, num_decodes: int, decode_context_tokens: int) -> BatchShape:
        """A pure-decode step: ``num_decodes`` requests, each sampling one token."""
        return cls((), (), num_decodes, decode_context_tokens, num_decodes)

    @classmethod
    def prefill(cls, num_tokens: int, num_computed_tokens: int = 0) -> BatchShape:
        """One request computing ``num_tokens`` prompt tokens after ``num_computed_tokens`` cached
        ones, finishing its prompt (its first token is sampled)."""
        return cls((num_tokens,), (num_computed_tokens,), 0, 0, 1)

    @property
    def num_seqs(self) -> int:
        """Requests scheduled in the step (prefill entries plus decodes)."""
        return len(self.prefill_tokens) + self.num_decodes

    @property
    def num_tokens(self) -> int:
        """Tokens the step computes (vLLM's ``total_num_scheduled_tokens``)."""
        return sum(self.prefill_tokens) + self.num_decodes


class CostModel(Protocol):
    """What the engine asks of a cost model: the duration of a step of a given :class:`BatchShape`.

    The engine calls :meth:`step_time_s` for every step it plans one by one, :meth:`breakdown`
    where the parts are shown (the step log's stage breakdown, CUDA-graph padding, MTP proposals),
    and the decode forms below for runs of pure-decode steps
    (:mod:`simulator.engine.decode_run`, which derives its prices from them once per cost model)
    and for speculative verification. Every form must give the float :meth:`step_time_s` gives for
    the same shape, bit for bit: the engine mixes them and promises the same run whichever it
    takes (``tests/test_speed.py`` checks each shipped model). The ``*_fn`` and ``decode_affine``
    forms are shortcuts: a model without one returns None and the engine prices those steps with
    :meth:`decode_run_times` / :meth:`step_time_s`. A new cost model need only give
    :meth:`breakdown` and :meth:`step_time_s`: :class:`simulator.cost.derived.BaseCostModel`
    derives the rest. A pipelined replica (``pipeline_parallel_size`` > 1) asks :meth:`stage_times_s`
    for every step instead of :meth:`step_time_s`.
    """

    def breakdown(self, shape: BatchShape) -> StepTime: ...

    def step_time_s(self, shape: BatchShape) -> float:
        """``breakdown(shape).total_s``, without building the breakdown (the engine's hot path)."""
        ...

    def stage_times_s(self, shape: BatchShape) -> list[float]:
        """What each pipeline stage spends on a step of ``shape``, in stage order: its layers' share
        of the step, plus (all but the last) the send of the hidden states to the next stage; the
        first also the step's CPU overhead, the last the LM head. One entry, ``step_time_s(shape)``,
        for a replica of one stage. The entries add up to ``step_time_s(shape)`` up to rounding: a
        batch alone traverses every stage, and a pipelined replica keeps up to one batch per stage
        in flight (:mod:`simulator.engine.pipeline`)."""
        ...

    def decode_run_times(self, num_decodes: int, decode_context_tokens: np.ndarray) -> np.ndarray:
        """Durations of consecutive pure-decode steps of ``num_decodes`` requests, one per entry of
        ``decode_context_tokens`` (each step's :attr:`BatchShape.decode_context_tokens`). Must not
        decrease as the context grows (the engine relies on it to bound runs)."""
        ...

    def decode_step_time_s(self, num_decodes: int, decode_context_tokens: int) -> float:
        """Duration of one pure-decode step: ``step_time_s(BatchShape.decode(num_decodes,
        decode_context_tokens))`` (same as ``decode_run_times`` for one entry)."""
        ...

    def decode_affine(self, num_decodes: int) -> tuple[float, float] | None:
        """``(a, b)`` when a pure-decode step of ``num_decodes`` requests takes exactly ``a + b *
        decode_context_tokens`` seconds (the engine then plans decode runs in closed form), else None."""
        ...

    def decode_step_fn(self, num_decodes: int) -> Callable[[float], float] | None:
        """:meth:`decode_step_time_s` at ``num_decodes`` as a function of the context sum on plain
        floats (short decode runs, draft proposals), or None."""
        ...

    def decode_steps_fn(self, num_decodes: int) -> DecodeSteps | None:
        """:meth:`decode_step_fn`'s steps in one function (:data:`DecodeSteps`), where the model
        inlines them; None: the engine builds them from :meth:`decode_step_fn`."""
        ...

    def decode_step_terms(self, num_decodes: int) -> tuple[float, float] | None:
        """``(fixed, slope)`` where :meth:`decode_step_fn` computes ``fixed + slope * s``, these
        float operations (a caller summing many steps inlines them), else None."""
        ...

    def verify_step_fn(self, num_seqs: int, num_query_tokens: int) -> VerifyStep | None:
        """A speculative verification step's duration (:data:`VerifyStep`) with the terms that
        depend only on the batch size computed once, or None (:func:`verify_step_fn` falls back
        to :meth:`step_time_s`)."""
        ...

    def group_step_time_s(self, shapes: Sequence[BatchShape]) -> float:
        """The duration of one step of a replica's attention data-parallel ranks, which run in
        lockstep (``deployment.data_parallel_size``; :mod:`simulator.engine.data_parallel`):
        ``shapes`` holds one shape per rank, an idle rank's dummy batch among them. Each rank's own
        part (attention, dense layers, router, shared experts, CPU time) runs beside the others',
        the slowest setting the pace; a model whose ranks share their routed experts runs those
        once over every rank's tokens, and the all-to-all at the busiest rank's
        (:func:`lockstep_time_s`). A model whose ranks share nothing: the slowest rank's
        :meth:`step_time_s`."""
        ...


def split_stages(total_s: float, overhead_s: float, sends_s: list[float], last_s: float,
                 layers: list[int]) -> list[float]:
    """A step of ``total_s`` over pipeline stages of ``layers`` layers each: what is left after the
    CPU overhead, the stage sends and the last stage's own work (final norm, LM head, sampling) is
    shared by layers; each stage adds its send to the next (the last, ``last_s``), the first the
    overhead. The entries add up to ``total_s`` up to rounding."""
    layered = total_s - overhead_s - sum(sends_s) - last_s
    num_layers = sum(layers)
    stages = [layered * n / num_layers + own for n, own in zip(layers, [*sends_s, last_s], strict=True)]
    stages[0] += overhead_s
    return stages


DecodeSteps = Callable[[int, int, float], tuple[list[float], bool]]
"""``steps(ctx1, k, delta)``: the durations of up to ``k`` pure-decode steps of one batch, the first
over a context sum of ``ctx1`` and each next over one more token per sequence, priced one by one
until their running sum (added in order from 0.0) reaches ``delta``; and whether it did. A cost
model's ``decode_steps_fn(num_decodes)`` gives one where its ``decode_step_fn`` exists, with the
same floats as that function step for step."""


def decode_steps_from(step_fn: Callable[[float], float], num_decodes: int) -> DecodeSteps:
    """:data:`DecodeSteps` from a one-step function of the context sum (``decode_step_fn``)."""
    def steps(ctx1: int, k: int, delta: float) -> tuple[list[float], bool]:
        out: list[float] = []
        cum = 0.0
        for j in range(k):
            d = step_fn(float(ctx1 + num_decodes * j))
            out.append(d)
            cum += d
            if cum >= delta:
                return out, True
        return out, False
    return steps


VerifyStep = Callable[[list[int]], float]
"""``step(computed)``: the duration of a speculative verification step of ``len(computed)``
requests, each computing the same ``q`` query tokens over its ``computed[i]`` cached tokens and
sampling all of them: ``step_time_s(BatchShape([q] * n, computed, 0, 0, n * q))``, the same float.
A cost model's optional ``verify_step_fn(num_seqs, num_query_tokens)`` gives one with the terms that
depend only on the batch size computed once (or None); :func:`verify_step_fn` falls back to
``step_time_s``."""


def verify_step_fn(cost: CostModel, num_seqs: int, num_query_tokens: int) -> VerifyStep:
    """``cost``'s :data:`VerifyStep` for ``num_seqs`` requests of ``num_query_tokens`` query tokens."""
    fn = cost.verify_step_fn(num_seqs, num_query_tokens)
    if fn is not None:
        return fn
    q, sampled, step_time_s = [num_query_tokens] * num_seqs, num_seqs * num_query_tokens, cost.step_time_s
    return lambda computed: step_time_s(BatchShape(q, computed, 0, 0, sampled))


def lockstep_time_s(step_time_s: Callable[[BatchShape], float], shared_s: Callable[[int, int], float],
                    shapes: Sequence[BatchShape], data_parallel_size: int) -> float:
    """A lockstep step of data-parallel ranks (:meth:`CostModel.group_step_time_s`) for a model whose
    :meth:`~CostModel.step_time_s` of one rank's ``T`` tokens includes ``shared_s(T, DP x T)``, the
    part the ranks share: ``shared_s(rank_tokens, group_tokens)`` is every MoE layer's routed
    experts over ``group_tokens`` (all ranks' tokens) plus their collectives (the all-to-all of
    ``rank_tokens`` per rank, or the all-gather and reduce-scatter of ``group_tokens``). The step
    is the slowest rank's own part (its step without its shared part) plus the shared part at the
    busiest rank's tokens and the group's total; with every rank as busy as the first it is that
    rank's :meth:`~CostModel.step_time_s`."""
    own, most, total = 0.0, 0, 0
    for shape in shapes:
        tokens = shape.num_tokens
        own = max(own, step_time_s(shape) - shared_s(tokens, data_parallel_size * tokens))
        most = max(most, tokens)
        total += tokens
    return own + shared_s(most, total)


def slowest_rank_s(step_time_s: Callable[[BatchShape], float], shapes: Sequence[BatchShape]) -> float:
    """:meth:`CostModel.group_step_time_s` of a model whose ranks share nothing: the slowest rank's step."""
    slowest = 0.0
    for shape in shapes:
        slowest = max(slowest, step_time_s(shape))
    return slowest


COST_MODELS: Registry[Callable[..., CostModel]] = Registry("cost model", "hardware.cost_model")
register = COST_MODELS.register
"""Class decorator adding a cost model to :data:`COST_MODELS` under a name."""


