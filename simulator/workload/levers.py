"""Client-side request levers: what clients ask for and what they see.

* ``client.max_tokens`` caps each request's output tokens and ``client.max_prompt_tokens`` trims
  longer prompts to their last tokens (vLLM's ``max_tokens`` and ``truncate_prompt_tokens``);
  both apply when the workload is drawn, before the ``max_model_len`` check.
* ``client.stream: false``: the client receives the whole response at once, so the TTFT it sees is
  the end-to-end latency (the engine's first-token instant stays in ``first_token_time``).

Timeouts and shedding (``client.timeout_s``, ``admission.*``) act inside the engine:
:mod:`simulator.engine.deadlines`. Which of these combine with which features (sessions, shared
prefixes, disaggregated pools) is :mod:`simulator.capabilities`' table.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from simulator.scenario.config import Scenario

Records = TypeVar("Records", bound=Any)


def cap_lengths(scenario: Scenario, prompt: np.ndarray, output: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Apply ``client.max_prompt_tokens`` (keep the last tokens) and ``client.max_tokens``."""
    client = scenario.client
    if client.max_prompt_tokens is not None:
        prompt = np.minimum(prompt, client.max_prompt_tokens)
    if client.max_tokens is not None:
        output = np.minimum(output, client.max_tokens)
    return prompt, output


def apply_client_view(requests: Records, scenario: Scenario) -> Records:
    """Latencies as the client sees them: without streaming the first token arrives with the last;
    ``ttua_s`` (time to usable answer) is the whole answer, or with streaming and
    ``client.usable_answer_tokens: N`` the N-th token (at the request's own mean token pace) plus
    the post-processing stages (``post_s``, when the scenario has them). ``requests`` is the request
    frame or a run's :class:`simulator.run.records.RequestColumns`; its columns are set in place."""
    e2e = np.asarray(requests["e2e_s"], dtype=float)
    if not scenario.client.stream:
        requests["ttft_s"] = e2e.copy()
    usable = scenario.client.usable_answer_tokens
    if usable is None or not scenario.client.stream:
        requests["ttua_s"] = e2e.copy()
    else:
        n = np.minimum(usable, np.asarray(requests["num_output_tokens"]))
        pace = np.nan_to_num(np.asarray(requests["tpot_s"], dtype=float))
        post = np.asarray(requests["post_s"]) if "post_s" in requests else 0.0
        ttua = np.asarray(requests["ttft_s"]) + np.maximum(n - 1, 0) * pace + post
        requests["ttua_s"] = np.minimum(ttua, e2e)
    return requests


