"""Observations of a real serving engine: what ``llmplan observe`` records, and vLLM's own
``vllm bench serve --save-result --save-detailed`` JSON, read into one shape.

An observation is a run of requests sent to an OpenAI-compatible streaming endpoint under a
controlled load: per request its send instant, token counts and the instants its tokens streamed
back. It serves twice:

* as a trace (``workload.arrival: {process: trace, format: observation, path: ...}``): the same
  arrivals and lengths replayed in ``simulate`` (:func:`trace_frame`);
* as the target of ``llmplan calibrate --from-observation`` (:mod:`calibrate.fit`), which compares
  the simulated TTFT, TPOT and E2E of each request with the observed ones.

The ``llmplan-observation`` file (version 1) is one JSON document::

    {"format": "llmplan-observation", "version": 1,
     "header": {"endpoint", "model", "engine": {"version"}, "load": {...},
                "client": {..., "host_pauses": null | {"pauses": [[start_s, length_s], ...]}}, "date",
                "metrics_before": {...}, "metrics_after": {...}},
     "requests": [{"id", "send_s", "prompt_tokens", "output_tokens", "max_tokens", "first_token_s",
                   "end_s", "chunk_s": [...], "chunk_tokens": [...], "usage": "server" | "client",
                   "error": null | "..."}]}

Times are seconds on the client's clock from the start of the run. A vLLM bench result gives
``start_times`` (absolute), ``input_lens``, ``output_lens``, ``ttfts`` and ``itls`` (seconds); runs
saved without ``--save-detailed`` lack them and are refused. No torch, no network here.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.errors import ScenarioError
from simulator.scenario.files import decode_text, read_bytes, require_file
from simulator.scenario.limits import MAX_MODEL_LEN, MAX_NUM_REQUESTS, MAX_TIME_S

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

OBSERVATION_FORMAT = "llmplan-observation"
OBSERVATION_VERSION = 1
#: Largest observation file read (a request with a few thousand chunk instants is ~50 KB).
MAX_OBSERVATION_BYTES = 1024 * 1024 * 1024
#: Two tokens of one request that reach the client this close together (100 µs) did not leave the
#: engine a step apart, as no engine runs a step that fast: they were read back to back by a client
#: that fell behind, or held up together in the server's front end.
BUNCHED_GAP_S = 1e-4
#: Share of an observation's inter-token gaps under :data:`BUNCHED_GAP_S` above which its stream is
#: flagged as read late. Between repeats of the real-vLLM runs of docs/fidelity.md, on a quiet machine,
#: 0-14% (a front-end stall now and then releases a few tokens at once); with the client starved of CPU
#: by other jobs, 43-89%.
BUNCHED_SHARE_LIMIT = 0.25
#: Per-request columns of :attr:`Observation.requests`.
REQUEST_COLUMNS = ("send_s", "num_prompt_tokens", "num_output_tokens", "ttft_s", "e2e_s", "tpot_s", "ok")


@dataclass(frozen=True)
class Observation:
    """One observed run: where and how it was measured, and per request what happened."""

    path: str
    source: str
    """``llmplan observe`` or ``vllm bench serve``."""
    header: dict[str, Any]
    requests: pd.DataFrame
    """:data:`REQUEST_COLUMNS`, sorted by send instant, the first at 0; ``ok`` False for a failed
    request (its latencies NaN). ``tpot_s``: (E2E - TTFT) / (output tokens - 1), NaN for one token."""
    itls: list[list[float]] = field(default_factory=list, repr=False)
    """Per request, the gaps (s) between the instants its tokens arrived (a chunk of k tokens counts
    as k tokens arriving evenly over its gap), same order as ``requests``."""
    origin_s: float = 0.0
    """The first send's instant on the run's clock (``requests.send_s`` counts from it)."""

    @property
    def completed(self) -> pd.DataFrame:
        return self.requests[self.requests["ok"]]

    def counter(self, name: str) -> float | None:
        """How much the server's Prometheus counter ``name`` grew over the run (``header.metrics_delta``),
        summed over its label sets: ``name`` is the metric's name without its namespace and labels
        (``num_preemptions_total`` for vLLM's ``vllm:num_preemptions_total{model_name="..."}``); None
        where the server exposed no such metric."""
        delta = self.header.get("metrics_delta") or {}
        hits = [v for k, v in delta.items()
                if k.split("{")[0].split(":")[-1] == name and isinstance(v, (int, float))]
        return float(sum(hits)) if hits else None

    def bunched_share(self) -> float:
        """Share of the completed requests' inter-token gaps under :data:`BUNCHED_GAP_S` (NaN when no
        request streamed two tokens)."""
        done = self.requests["ok"].to_numpy()
        gaps = [g for ok, gs in zip(done, self.itls, strict=False) if ok for g in gs]
        return float(np.mean(np.asarray(gaps) < BUNCHED_GAP_S)) if gaps else math.nan

    def stream_warning(self) -> str | None:
        """A sentence saying this run's tokens were read late (:meth:`bunched_share` above
        :data:`BUNCHED_SHARE_LIMIT`), else None."""
        share = self.bunched_share()
        if not share > BUNCHED_SHARE_LIMIT:
            return None
        return (f"{Path(self.path).name}: {share:.0%} of its inter-token gaps are under {BUNCHED_GAP_S * 1e3:g} ms "
                f"(tokens read back to back; flagged above {BUNCHED_SHARE_LIMIT:.0%}): the client, or "
                "the server's front end, fell behind the engine, so its TTFT, TPOT and inter-token times describe "
                "that, not the engine. Observe again with the client on a machine that is not busy")

    def host_pauses(self) -> list[tuple[float, float]] | None:
        """``(start_s, length_s)`` of each pause of the client's machine during the run, start on
        ``requests.send_s``'s clock (``llmplan observe``'s heartbeat, ``header.client.host_pauses``);
        None where nothing was watched (a ``vllm bench serve`` result, a run on a test clock)."""
        client = self.header.get("client")
        host = client.get("host_pauses") if isinstance(client, dict) else None
        if not isinstance(host, dict):
            return None
        return [(float(a) - self.origin_s, float(b)) for a, b in host.get("pauses") or ()]

    def paused_requests(self) -> int:
        """How many requests were in flight (sent, not yet answered in full) across a host pause."""
        pauses = self.host_pauses() or []
        if not pauses:
            return 0
        req = self.requests
        start = req["send_s"].to_numpy()
        end = np.where(req["ok"].to_numpy(), start + req["e2e_s"].fillna(0.0).to_numpy(), np.inf)
        hit = np.zeros(len(req), dtype=bool)
        for a, b in pauses:
            hit |= (start < a + b) & (end > a)
        return int(hit.sum())

    def pause_totals(self) -> tuple[int, float, float] | None:
        """The host pauses' number, total and longest length (s); None where nothing was watched."""
        pauses = self.host_pauses()
        if pauses is None:
            return None
        lengths = [b for _, b in pauses]
        return len(lengths), float(sum(lengths)), max(lengths, default=0.0)

    def pause_warning(self) -> str | None:
        """A sentence saying the client's machine paused during the run (:meth:`host_pauses`), else None."""
        totals = self.pause_totals()
        if not totals or not totals[0]:
            return None
        count, total, longest = totals
        return (f"{Path(self.path).name}: the client's machine stopped {count} time(s) during the run, "
                f"{total:.2f} s in all, the longest {longest:.2f} s (a heartbeat process missed "
                f"its ticks: the host paused the machine, or every CPU was taken); the {self.paused_requests()} "
                "requests in flight then waited whatever the server did, so the run's tail latencies include "
                "pauses no engine model has. Observe again on a machine that does not pause, or read its "
                "tails knowing that")

    def warnings(self) -> list[str]:
        """Every reason to doubt this run as a measurement of the engine (:meth:`stream_warning`,
        :meth:`pause_warning`)."""
        return [w for w in (self.stream_warning(), self.pause_warning()) if w is not None]

    def closed_loop_clients(self) -> int | None:
        """The clients of a closed loop (each sent its next request as its last one ended): an ``llmplan
        observe --concurrency`` run, or a ``vllm bench serve --max-concurrency`` run with no request
        rate; None for any other load (its send instants are the arrivals)."""
        load = self.header.get("load")
        if not isinstance(load, dict):
            return None
        n, closed = _clients(load, self.source)
        return n if closed else None

    def burst(self) -> bool:
        """Whether every request was sent at once (``llmplan observe --offline``, or ``vllm bench serve``
        with no request rate and no concurrency bound). A server takes a burst's requests in the order
        its front end reads them, which need not be the order of their send instants: on the CPU vLLM
        of docs/fidelity.md, a burst of 100-200 sent within 0.1-0.15 s was answered in an order whose
        rank correlation with the sends was 0.64-0.80."""
        load = self.header.get("load")
        return isinstance(load, dict) and load.get("arrival") == "offline" and self.closed_loop_clients() is None

    def shared_prefix(self) -> tuple[int, int] | None:
        """``(prefix_tokens, prefix_groups)`` of an ``llmplan observe --prefix-tokens`` run (the
        leading tokens the prompts of each group shared), None for a run without shared prefixes."""
        load = self.header.get("load")
        if not isinstance(load, dict) or not load.get("prefix_tokens"):
            return None
        return int(load["prefix_tokens"]), int(load.get("prefix_groups") or 1)

    def describe(self, name: str | None = None) -> str:
        """The run in a line: ``name`` (default the file's name), its source, load and completed requests."""
        load = self.header.get("load", {})
        what = load.get("arrival") or load.get("mode") or "?"
        return (f"{name or Path(self.path).name} ({self.source}, {what}, {len(self.completed)} of "
                f"{len(self.requests)} requests completed)")


def run_names(paths: list[str]) -> dict[str, str]:
    """A short name for each observation file: its file name, with as many of its folders as tell it
    from the others (``rep0/offline.json`` and ``rep1/offline.json``, not ``offline.json`` twice)."""
    parts = {p: Path(p).resolve().parts for p in paths}
    names = {}
    for p, mine in parts.items():
        k = 1
        while k < len(mine) and any(q != p and others[-k:] == mine[-k:] for q, others in parts.items()):
            k += 1
        names[p] = "/".join(mine[-k:])
    return names


def read_observation(path: str | Path, field: str = "--from-observation") -> Observation:
    """Read an ``llmplan observe`` file or a ``vllm bench serve --save-detailed`` result.

    Raises:
        ScenarioError: a missing or unreadable file, another JSON shape, or a bad record (named).
    """
    p = Path(path)
    require_file(p, field, str(path), "observation file")
    text = decode_text(read_bytes(p, f"{field} {path}", max_bytes=MAX_OBSERVATION_BYTES, what="an observation"),
                       f"{field} {path}")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"{field} {path}", f"line {exc.lineno}", f"not JSON ({exc.msg}); expected an "
                            "`llmplan observe` file or a `vllm bench serve --save-detailed` result") from None
    if isinstance(doc, dict) and doc.get("format") == OBSERVATION_FORMAT:
        return _read_llmplan(doc, str(path), field)
    if isinstance(doc, dict) and "ttfts" in doc and "input_lens" in doc:
        return _read_vllm_bench(doc, str(path), field)
    raise ScenarioError(f"{field} {path}", type(doc).__name__, f"neither an `llmplan observe` file (format: "
                        f"{OBSERVATION_FORMAT}) nor a `vllm bench serve --save-detailed` result (ttfts, itls, "
                        "input_lens, output_lens, start_times)")


def _frame(send: list[float], prompt: list[int], output: list[int], ttft: list[float], e2e: list[float],
           ok: list[bool], itls: list[list[float]], where: str) -> tuple[pd.DataFrame, list[list[float]]]:
    import pandas as pd

    n = len(send)
    if n == 0:
        raise ScenarioError(where, 0, "the observation has no requests")
    if n > MAX_NUM_REQUESTS:
        raise ScenarioError(where, n, f"an observation may hold at most {MAX_NUM_REQUESTS:,} requests")
    df = pd.DataFrame({"send_s": np.asarray(send, float), "num_prompt_tokens": np.asarray(prompt, np.int64),
                       "num_output_tokens": np.asarray(output, np.int64), "ttft_s": np.asarray(ttft, float),
                       "e2e_s": np.asarray(e2e, float), "ok": np.asarray(ok, bool)})
    df.loc[~df["ok"], ["ttft_s", "e2e_s"]] = np.nan
    many = df["num_output_tokens"] > 1
    df["tpot_s"] = np.where(many, (df["e2e_s"] - df["ttft_s"]) / (df["num_output_tokens"] - 1).clip(lower=1), np.nan)
    order = np.argsort(df["send_s"].to_numpy(), kind="stable")
    df = df.iloc[order].reset_index(drop=True)
    df["send_s"] -= df["send_s"].iloc[0]
    if df["send_s"].iloc[-1] > MAX_TIME_S:
        raise ScenarioError(where, f"{df['send_s'].iloc[-1]:.3g} s", f"the observation may span at most "
                            f"{MAX_TIME_S:.0e} s")
    if not df["ok"].any():
        raise ScenarioError(where, n, "no request of the observation completed")
    return df[list(REQUEST_COLUMNS)], [itls[i] for i in order]


def _number(rec: dict[str, Any], key: str, where: str, *, integer: bool = False, optional: bool = False) -> Any:
    v = rec.get(key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ScenarioError(f"{where}.{key}", v, "must be a non-negative number" + (" (an integer)" if integer else ""))
    if integer:
        if not float(v).is_integer() or v > MAX_MODEL_LEN:
            raise ScenarioError(f"{where}.{key}", v, f"must be an integer token count up to {MAX_MODEL_LEN:,}")
        return int(v)
    return float(v)


def _clients(load: dict[str, Any], source: str) -> tuple[Any, bool]:
    """The load's clients as given and whether it was a closed loop (each client sent its next
    request as its last one ended)."""
    if source == "vllm bench serve":
        n = load.get("max_concurrency")
        return n, n is not None and load.get("request_rate") in (None, "inf", math.inf)
    return load.get("concurrency"), load.get("arrival") == "closed"


def _check_load(header: dict[str, Any], source: str, where: str) -> None:
    """The header's ``load`` as far as a replay reads it: a closed loop's clients, shared prefixes."""
    load = header.get("load")
    if load is None:
        return
    bench = source == "vllm bench serve"         # its load is the result's own top-level fields
    w = f"{where}: " if bench else f"{where}: header.load."
    if not isinstance(load, dict):
        raise ScenarioError(w.rstrip(". "), type(load).__name__, "must be a mapping (the load the run was "
                            "observed under)")

    def count(key: str, least: int, most: int) -> None:
        v = load.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                              or not float(v).is_integer() or not least <= v <= most):
            raise ScenarioError(f"{w}{key}", v, f"must be an integer from {least} to {most:,}")

    n, closed = _clients(load, source)
    key = "max_concurrency" if bench else "concurrency"
    if closed and n is None:
        raise ScenarioError(f"{w}{key}", None, "a closed loop's number of clients is missing")
    count(key, 1, MAX_NUM_REQUESTS)
    if not bench:
        count("prefix_tokens", 0, MAX_MODEL_LEN)
        count("prefix_groups", 1, MAX_NUM_REQUESTS)


def _check_host(header: dict[str, Any], where: str) -> None:
    """``header.client.host_pauses``: null, or ``{"pauses": [[start_s, length_s], ...], ...}``."""
    client = header.get("client")
    host = client.get("host_pauses") if isinstance(client, dict) else None
    if host is None:
        return
    w = f"{where}: header.client.host_pauses"
    pauses = host.get("pauses") if isinstance(host, dict) else None
    if not isinstance(pauses, list):
        raise ScenarioError(w, host if not isinstance(host, dict) else pauses, "must be null or a mapping whose "
                            "`pauses` is a list of [start_s, length_s] pairs (llmplan observe's heartbeat)")
    if len(pauses) > MAX_NUM_REQUESTS:
        raise ScenarioError(f"{w}.pauses", len(pauses), f"may hold at most {MAX_NUM_REQUESTS:,} pauses")
    for i, pair in enumerate(pauses):
        if (not isinstance(pair, list) or len(pair) != 2
                or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in pair)
                or not 0 <= pair[1] <= MAX_TIME_S or abs(pair[0]) > MAX_TIME_S):
            raise ScenarioError(f"{w}.pauses[{i}]", pair, f"must be [start_s, length_s]: finite seconds, the "
                                f"length from 0 to {MAX_TIME_S:.0e}")


def _read_llmplan(doc: dict[str, Any], path: str, field: str) -> Observation:
    where = f"{field} {path}"
    if doc.get("version") != OBSERVATION_VERSION:
        raise ScenarioError(f"{where}: version", doc.get("version"), f"this llmplan reads version "
                            f"{OBSERVATION_VERSION} observations")
    header, reqs = doc.get("header"), doc.get("requests")
    if not isinstance(header, dict) or not isinstance(reqs, list):
        raise ScenarioError(where, type(reqs).__name__, "needs a header mapping and a requests list")
    send, prompt, output, ttft, e2e, ok, itls = [], [], [], [], [], [], []
    for i, rec in enumerate(reqs):
        w = f"{where}: requests[{i}]"
        if not isinstance(rec, dict):
            raise ScenarioError(w, type(rec).__name__, "must be a mapping")
        good = rec.get("error") in (None, "")
        send.append(_number(rec, "send_s", w))
        prompt.append(_number(rec, "prompt_tokens", w, integer=True))
        out = _number(rec, "output_tokens", w, integer=True) if good else 0
        if good and out < 1:
            raise ScenarioError(f"{w}.output_tokens", out, "a completed request has at least one output token")
        output.append(out)
        if good:
            first, end = _number(rec, "first_token_s", w), _number(rec, "end_s", w)
            if not send[-1] <= first <= end:
                raise ScenarioError(w, f"send {send[-1]:.6g}, first token {first:.6g}, end {end:.6g}",
                                    "must be in this order (seconds from the start of the run)")
            ttft.append(first - send[-1])
            e2e.append(end - send[-1])
            itls.append(_gaps(*_chunks(rec, w, first, end, out)))
        else:
            ttft.append(math.nan)
            e2e.append(math.nan)
            itls.append([])
        ok.append(good)
    _check_load(header, "llmplan observe", where)
    _check_host(header, where)
    df, itls = _frame(send, prompt, output, ttft, e2e, ok, itls, where)
    obs = Observation(path, "llmplan observe", header, df, itls, min(send))
    prefix = obs.shared_prefix()
    shortest = int(df["num_prompt_tokens"].min())
    if prefix is not None and prefix[0] >= shortest:
        raise ScenarioError(f"{where}: header.load.prefix_tokens", prefix[0], f"must be below the shortest prompt "
                            f"({shortest:,} tokens): every prompt starts with its group's prefix")
    return obs


def _chunks(rec: dict[str, Any], where: str, first: float, end: float,
            output_tokens: int) -> tuple[list[float], list[int]]:
    """A completed request's ``chunk_s`` (instants, in order, from its first token to its end) and
    ``chunk_tokens`` (one count per chunk, none given: one token each; together at most the request's
    ``output_tokens``), checked."""
    chunks, counts = rec.get("chunk_s"), rec.get("chunk_tokens")
    chunks = [] if chunks is None else chunks
    counts = [] if counts is None else counts
    if not isinstance(chunks, list) or not all(
            not isinstance(t, bool) and isinstance(t, (int, float)) and math.isfinite(t) for t in chunks):
        raise ScenarioError(f"{where}.chunk_s", str(chunks)[:60], "must be a list of instants (seconds)")
    for j, t in enumerate(chunks):
        if not first <= t <= end or (j and t < chunks[j - 1]):
            raise ScenarioError(f"{where}.chunk_s[{j}]", t, f"must not decrease and lie between the first token "
                                f"({first:.6g} s) and the end ({end:.6g} s)")
    if not isinstance(counts, list) or not all(
            not isinstance(k, bool) and isinstance(k, int) and k >= 0 for k in counts):
        raise ScenarioError(f"{where}.chunk_tokens", str(counts)[:60], "must be a list of token counts (integers "
                            "from 0)")
    if counts and len(counts) != len(chunks):
        raise ScenarioError(f"{where}.chunk_tokens", f"{len(counts)} counts for {len(chunks)} chunks",
                            "give one token count per chunk_s instant, or none")
    if sum(counts) > output_tokens:
        raise ScenarioError(f"{where}.chunk_tokens", f"{sum(counts):,} tokens",
                            f"more than the request's output_tokens ({output_tokens:,})")
    return [float(t) for t in chunks], counts


def _gaps(chunk_s: list[float], chunk_tokens: list[int]) -> list[float]:
    """Inter-token gaps from chunk instants and token counts: a chunk of k tokens after a gap g
    counts as k gaps of g / k (the first chunk's tokens after the first are counted at 0 gap)."""
    out: list[float] = []
    for j in range(1, len(chunk_s)):
        k = max(1, int(chunk_tokens[j]) if j < len(chunk_tokens) else 1)
        out.extend([(chunk_s[j] - chunk_s[j - 1]) / k] * k)
    return out


def _read_vllm_bench(doc: dict[str, Any], path: str, field: str) -> Observation:
    where = f"{field} {path}"
    need = ("input_lens", "output_lens", "ttfts", "itls", "start_times")
    missing = [k for k in need if not isinstance(doc.get(k), list)]
    if missing:
        raise ScenarioError(where, ", ".join(missing), "missing from this vllm bench result: save it with "
                            "`vllm bench serve --save-result --save-detailed` (a vLLM that records start_times)")
    n = len(doc["input_lens"])
    if any(len(doc[k]) != n for k in need):
        raise ScenarioError(where, {k: len(doc[k]) for k in need}, "per-request lists of different lengths")
    listed = doc.get("errors")
    errors: list[Any] = listed if isinstance(listed, list) and len(listed) == n else [""] * n
    send, prompt, output, ttft, e2e, ok, itls = [], [], [], [], [], [], []
    for i in range(n):
        w = f"{where}: request {i}"
        rec = {k: doc[k][i] for k in need}
        failed = bool(errors[i]) or not rec["ttfts"]     # vLLM records a failed request's ttft as 0
        send.append(_number(rec, "start_times", w))
        prompt.append(_number(rec, "input_lens", w, integer=True))
        out = 0 if failed else _number(rec, "output_lens", w, integer=True)
        good = out > 0
        output.append(out)
        gaps = rec["itls"] if isinstance(rec["itls"], list) else []
        if good:
            first = _number(rec, "ttfts", w)
            if not all(isinstance(g, (int, float)) and math.isfinite(g) and g >= 0 for g in gaps):
                raise ScenarioError(f"{w}.itls", str(gaps)[:60], "must be a list of non-negative seconds")
            ttft.append(first)
            e2e.append(first + float(sum(gaps)))
        else:
            ttft.append(math.nan)
            e2e.append(math.nan)
        ok.append(good)
        itls.append([float(g) for g in gaps] if good else [])
    df, itls = _frame(send, prompt, output, ttft, e2e, ok, itls, where)
    kept = ("date", "backend", "model_id", "tokenizer_id", "num_prompts", "request_rate", "burstiness",
            "max_concurrency", "duration")
    header: dict[str, Any] = {k: doc.get(k) for k in kept if k in doc}
    header["model"] = doc.get("model_id")
    header["load"] = {"arrival": "offline" if doc.get("request_rate") in (None, "inf", math.inf) else "poisson",
                      "request_rate": doc.get("request_rate"), "max_concurrency": doc.get("max_concurrency")}
    _check_load(header, "vllm bench serve", where)
    return Observation(path, "vllm bench serve", header, df, itls)


def trace_frame(path: Path, field: str = "workload.arrival.path") -> pd.DataFrame:
    """The observation as a trace (:func:`simulator.workload.traffic.load_trace`): the completed
    requests' send instants (the first at 0) and token counts, ``max_tokens`` being the tokens the
    engine produced (an observation run with ``ignore_eos`` produces exactly its ``max_tokens``)."""
    obs = read_observation(path, field)
    done = obs.completed
    df = done[["send_s", "num_prompt_tokens", "num_output_tokens"]].rename(
        columns={"send_s": "arrival_time", "num_output_tokens": "max_tokens"}).reset_index(drop=True)
    df["arrival_time"] -= df["arrival_time"].iloc[0]
    df["source_row"] = done.index.to_numpy()     # the request's index in send order, for messages
    return df
