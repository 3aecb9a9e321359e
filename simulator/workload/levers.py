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
    """Latencies as the client sees them: without streaming the first token arrives with the last."""
    if not scenario.client.stream:
        requests["ttft_s"] = requests["e2e_s"]
    return requests


