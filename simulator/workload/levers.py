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

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # pragma: no cover
    from simulator.scenario.config import Scenario


def cap_lengths(scenario: Scenario, prompt: np.ndarray, output: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Apply ``client.max_prompt_tokens`` (keep the last tokens) and ``client.max_tokens``."""
    client = scenario.client
    if client.max_prompt_tokens is not None:
        prompt = np.minimum(prompt, client.max_prompt_tokens)
    if client.max_tokens is not None:
        output = np.minimum(output, client.max_tokens)
    return prompt, output


def apply_client_view(requests: pd.DataFrame, scenario: Scenario) -> pd.DataFrame:
    """Latencies as the client sees them: without streaming the first token arrives with the last;
    ``ttua_s`` (time to usable answer) is the whole answer, or with streaming and
    ``client.usable_answer_tokens: N`` the N-th token (at the request's own mean token pace) plus
    the post-processing stages (``post_s``, when the scenario has them)."""
    if not scenario.client.stream:
        requests["ttft_s"] = requests["e2e_s"]
    usable = scenario.client.usable_answer_tokens
    if usable is None or not scenario.client.stream:
        requests["ttua_s"] = requests["e2e_s"]
    else:
        n = np.minimum(usable, requests["num_output_tokens"].to_numpy())
        pace = np.nan_to_num(requests["tpot_s"].to_numpy(dtype=float))
        post = requests["post_s"].to_numpy() if "post_s" in requests else 0.0
        ttua = requests["ttft_s"].to_numpy() + np.maximum(n - 1, 0) * pace + post
        requests["ttua_s"] = np.minimum(ttua, requests["e2e_s"].to_numpy())
    return requests


