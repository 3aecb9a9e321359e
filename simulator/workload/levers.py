"""Client-side request levers: what clients ask for and what they see.

* ``client.max_tokens`` caps each request's output tokens and ``client.max_prompt_tokens`` trims
  longer prompts to their last tokens (vLLM's ``max_tokens`` and ``truncate_prompt_tokens``);
  both apply when the workload is drawn, before the ``max_model_len`` check.
* ``client.stream: false``: the client receives the whole response at once, so the TTFT it sees is
  the end-to-end latency (the engine's first-token instant stays in ``first_token_time``).

Timeouts and shedding (``client.timeout_s``, ``admission.*``) act inside the engine:
:mod:`simulator.engine.deadlines`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # pragma: no cover
    from simulator.scenario.config import Scenario


def check_levers(scenario: Scenario) -> None:
    """Combinations these levers do not model, as clear errors.

    Raises:
        ScenarioError: deadlines with disaggregated pools (a request moves between replicas),
            prompt trimming with shared prefixes or sessions (trimming keeps the last tokens, which
            would cut the shared system prompt the block identities assume), or an output cap with
            sessions (a turn's prompt holds the previous turn's drawn answer).
    """
    from simulator.errors import ScenarioError

    client, admission, wl = scenario.client, scenario.admission, scenario.workload
    if scenario.scheduler.policy == "disaggregated":
        for field, value in (("client.timeout_s", client.timeout_s),
                             ("admission.max_queue_delay_s", admission.max_queue_delay_s)):
            if value is not None:
                raise ScenarioError(field, value, "not modelled with scheduler.policy 'disaggregated' (a request "
                                    "moves from a prefill to a decode replica); use admission.max_queue_len")
    if client.max_tokens is not None and getattr(wl, "sessions", None) is not None:
        raise ScenarioError("client.max_tokens", client.max_tokens,
                            "cannot be combined with workload.sessions: a turn's prompt is built from the "
                            "previous turn's drawn answer length; cap workload.output_tokens.max instead")
    if client.max_prompt_tokens is not None:
        for field in ("prefix", "sessions"):
            if getattr(wl, field, None) is not None:
                raise ScenarioError("client.max_prompt_tokens", client.max_prompt_tokens,
                                    f"cannot be combined with workload.{field}: trimming keeps a prompt's last "
                                    "tokens and would cut the shared prefix")


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


