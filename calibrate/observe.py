"""``llmplan observe URL``: drive an OpenAI-compatible streaming endpoint with a controlled load and
record what it did, request by request (the file format: :mod:`simulator.workload.observation`).

The load (:class:`Load`): Poisson arrivals at a rate, a closed loop of ``concurrency`` clients, an
offline burst (every request sent at once), or a trace's requests at its instants; prompt and
output lengths fixed, uniform in a range, or a trace's (:class:`TraceRequests`); optionally a
prefix shared by every prompt of a group (prefix caching). Prompts are lists
of token ids (``/v1/completions`` takes them on vLLM and SGLang), so their lengths are exact
without a tokenizer (``text_prompts``: words instead, one per token id, for servers that take text
only; their lengths are then the server's count); outputs are forced to their length with
``ignore_eos`` and ``min_tokens`` (vLLM's extensions; ``--no-ignore-eos``/``--no-min-tokens`` for
servers that refuse them). ``api="chat"`` sends each prompt as one user message to
``/v1/chat/completions`` instead (text; the server's chat template adds its tokens, and the
prompt length recorded is the server's ``usage`` count), for endpoints that serve chat only.

Per request it records the send instant, the instant of every streamed chunk and its token count
(from ``usage`` on every chunk where ``stream_options.continuous_usage_stats`` is honoured, else
one token per chunk), the first-token and end instants and the final ``usage`` (prompt and
completion tokens); once before and once after the run, the server's Prometheus ``/metrics``
(requests running and waiting, prefix-cache queries and hits, preemptions, KV-cache usage) and
``/version`` where it answers; the client machine's load averages before and after, and its
pauses during the run (:class:`HostWatch`). A run whose tokens were read back to back
(:meth:`~simulator.workload.observation.Observation.stream_warning`: the client fell behind the
engine), or during which the machine stopped, is logged as a warning. The run is bounded: ``num_requests``,
``duration_s`` for sending, and ``timeout_s`` per request; a request without an answer by then is
recorded as failed.

Standard library only (threads and ``http.client``) plus numpy for the seeded draws: no torch.
The clock and sleep are injectable, one clock reading per send and per streamed ``data:`` line,
so a test can play a server on a virtual clock.
"""
from __future__ import annotations

import datetime as _dt
import http.client
import json
import math
import os
import platform
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simulator.errors import ScenarioError
from simulator.workload.observation import OBSERVATION_FORMAT, OBSERVATION_VERSION

ARRIVALS = ("poisson", "closed", "offline", "trace")
#: The OpenAI routes a load can be sent to, by :attr:`Load.api`.
API_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
#: Most requests one observation sends.
MAX_REQUESTS = 100_000
#: Most requests in flight at once (each is a thread): past it, an open-loop load waits for a slot
#: before sending (the recorded send instants say when each request really went out).
MAX_IN_FLIGHT = 2048
#: Prometheus samples kept from ``/metrics`` (names containing one of these).
METRIC_KEYS = ("num_requests_running", "num_requests_waiting", "prefix_cache", "cache_hit", "preempt",
               "kv_cache_usage", "cache_usage", "prompt_tokens_total", "generation_tokens_total",
               "request_success", "num_running", "num_waiting", "queue",
               # the engine's own TTFT, E2E and prefill time (sum and count): against the client's, the front end
               *(f"{h}_seconds_{s}" for h in ("time_to_first_token", "e2e_request_latency", "request_prefill_time")
                 for s in ("sum", "count")))
#: Words that are one token each (after a space) in common BPE vocabularies: ``--text-prompts``
#: writes prompts of them for servers that take text only (lengths then approximate; the server's
#: ``usage`` gives the true count).
WORDS = ("the", "of", "and", "to", "in", "is", "for", "on", "with", "as", "at", "by", "from", "that", "this",
         "it", "be", "are", "was", "or", "an", "not", "but", "have", "they", "we", "you", "all", "can", "one",
         "more", "new", "time", "data", "use", "also", "like", "just", "over", "only", "year", "work", "first",
         "well", "way", "even", "back", "good", "very", "most")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s+([^\s]+)")


@dataclass(frozen=True)
class Lengths:
    """Token counts: ``lo`` when ``lo == hi``, else uniform on ``[lo, hi]``."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, text: str | int, option: str) -> Lengths:
        """``128`` (fixed) or ``64:256`` (uniform, both ends included)."""
        parts = str(text).split(":")
        try:
            lo, hi = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (0, -1)
        except ValueError:
            lo, hi = 0, -1
        if not 1 <= lo <= hi:
            raise ScenarioError(option, text, "a token count N >= 1, or LO:HI (uniform, 1 <= LO <= HI)")
        return cls(lo, hi)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.lo) if self.lo == self.hi else rng.integers(self.lo, self.hi + 1, n)

    def __str__(self) -> str:
        return str(self.lo) if self.lo == self.hi else f"{self.lo}:{self.hi}"


@dataclass(frozen=True)
class TraceRequests:
    """The first requests of a trace file (:func:`~simulator.workload.traces.load_trace`, in its time
    order): their prompt and output tokens and, for a ``trace`` load, their send instants."""

    path: str
    format: str
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    send_s: tuple[float, ...]
    """From 0 (the first request); empty when only the lengths are taken."""
    sha256: str

    @classmethod
    def read(cls, path: str | Path, fmt: str, num_requests: int, option: str, arrivals: bool) -> TraceRequests:
        """The first ``num_requests`` (with their send instants if ``arrivals``).

        Raises:
            ScenarioError: an unreadable trace (naming its row and column), or fewer requests than asked."""
        from simulator.cost.op_table import file_sha256
        from simulator.workload.traces import load_trace

        if not 1 <= num_requests <= MAX_REQUESTS:
            raise ScenarioError("--num-requests", num_requests, f"must be 1 to {MAX_REQUESTS:,}")

        table = load_trace(Path(path), fmt, field=option)
        if len(table) < num_requests:
            raise ScenarioError("--num-requests", num_requests, f"the trace {path} holds {len(table):,} requests: "
                                "send at most those")
        first = table.iloc[:num_requests]
        send = first["arrival_time"].to_numpy(float)
        return cls(str(path), fmt, tuple(int(x) for x in first["num_prompt_tokens"]),
                   tuple(int(x) for x in first["max_tokens"]),
                   tuple(float(x) for x in send - send[0]) if arrivals else (), file_sha256(Path(path)))

    def lengths(self) -> tuple[Lengths, Lengths]:
        """The range of its prompt and output tokens."""
        return (Lengths(min(self.prompt_tokens), max(self.prompt_tokens)),
                Lengths(min(self.output_tokens), max(self.output_tokens)))


@dataclass(frozen=True)
class Load:
    """What ``observe`` sends (see the module doc)."""

    arrival: str
    num_requests: int
    prompt_tokens: Lengths
    output_tokens: Lengths
    rate_per_s: float | None = None
    """``poisson``: mean requests per second."""
    concurrency: int | None = None
    """``closed``: clients, each sending its next request when its previous one ends."""
    duration_s: float | None = None
    """Stop sending after this long (the requests in flight are still awaited)."""
    prefix_tokens: int = 0
    """Leading tokens every prompt of a group shares."""
    prefix_groups: int = 1
    """Groups of prompts sharing a prefix (request i is in group i mod groups)."""
    seed: int = 0
    ignore_eos: bool = True
    min_tokens: bool = True
    token_ids: tuple[int, int] = (1000, 20000)
    """Prompt token ids are drawn from ``[lo, hi)`` (inside any real vocabulary, past special tokens)."""
    timeout_s: float = 600.0
    """Per request: the longest wait for the response to end."""
    text_prompts: bool = False
    """Send each prompt as text (one of :data:`WORDS` per token id) instead of token ids."""
    api: str = "completions"
    """``completions`` (``/v1/completions``) or ``chat`` (``/v1/chat/completions``: one user message of
    text per prompt, so it needs ``text_prompts``)."""
    trace: TraceRequests | None = None
    """Each request's lengths from a trace (``prompt_tokens`` and ``output_tokens`` then give their
    range), and for a ``trace`` load its send instant."""

    def check(self) -> None:
        if self.arrival not in ARRIVALS:
            raise ScenarioError("--arrival", self.arrival, f"allowed: {', '.join(ARRIVALS)}")
        if not 1 <= self.num_requests <= MAX_REQUESTS:
            raise ScenarioError("--num-requests", self.num_requests, f"must be 1 to {MAX_REQUESTS:,}")
        if self.arrival == "poisson" and not (self.rate_per_s and math.isfinite(self.rate_per_s)
                                              and self.rate_per_s > 0):
            raise ScenarioError("--rate", self.rate_per_s, "Poisson arrivals need a rate > 0 (requests/s)")
        if self.arrival == "closed" and not (self.concurrency and self.concurrency >= 1):
            raise ScenarioError("--concurrency", self.concurrency, "a closed loop needs >= 1 clients")
        if self.duration_s is not None and not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise ScenarioError("--duration-s", self.duration_s, "must be a positive number of seconds")
        if self.prefix_tokens < 0 or self.prefix_tokens >= self.prompt_tokens.lo:
            raise ScenarioError("--prefix-tokens", self.prefix_tokens, f"must be >= 0 and below the shortest prompt "
                                f"({self.prompt_tokens.lo} tokens)")
        if self.prefix_groups < 1:
            raise ScenarioError("--prefix-groups", self.prefix_groups, "must be >= 1")
        lo, hi = self.token_ids
        if not 0 <= lo < hi:
            raise ScenarioError("--token-ids", f"{lo}:{hi}", "LO:HI with 0 <= LO < HI")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ScenarioError("--timeout-s", self.timeout_s, "must be a positive number of seconds")
        if self.api not in API_PATHS:
            raise ScenarioError("api", self.api, f"allowed: {', '.join(API_PATHS)}")
        if (self.arrival == "trace") != (self.trace is not None and self.trace.send_s != ()) or \
                (self.trace is not None and len(self.trace.prompt_tokens) != self.num_requests):
            raise ScenarioError("--replay", self.trace.path if self.trace else None,
                                "a trace load needs its trace, with one send instant per request")
        if self.api == "chat" and not self.text_prompts:
            raise ScenarioError("--chat", True, "a chat message is text: send the prompts as text (--text-prompts)")

    def plan(self) -> tuple[np.ndarray, list[list[int]], np.ndarray]:
        """Seeded: the send offsets (s; NaN in a closed loop), prompts (token ids) and output lengths."""
        rng = np.random.default_rng(self.seed)
        n = self.num_requests
        if self.arrival == "poisson":
            assert self.rate_per_s is not None
            send = np.cumsum(rng.exponential(1.0 / self.rate_per_s, n))
            send -= send[0]
        elif self.arrival == "offline":
            send = np.zeros(n)
        elif self.arrival == "trace":
            assert self.trace is not None
            send = np.array(self.trace.send_s, dtype=float)
        else:
            send = np.full(n, np.nan)
        if self.trace is not None:
            plen, olen = np.array(self.trace.prompt_tokens), np.array(self.trace.output_tokens)
        else:
            plen, olen = self.prompt_tokens.draw(rng, n), self.output_tokens.draw(rng, n)
        lo, hi = self.token_ids
        prefixes = [rng.integers(lo, hi, self.prefix_tokens).tolist() for _ in range(self.prefix_groups)]
        prompts = [prefixes[i % self.prefix_groups] + rng.integers(lo, hi, int(plen[i]) - self.prefix_tokens).tolist()
                   for i in range(n)]
        return send, prompts, olen


@dataclass
class _Record:
    id: int
    prompt_tokens: int
    max_tokens: int
    send_s: float = math.nan
    first_token_s: float | None = None
    end_s: float | None = None
    output_tokens: int = 0
    chunk_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    usage: str = "client"
    error: str | None = None


class Endpoint:
    """The server at ``url`` (``http://host:port``, optionally ending in ``/v1``)."""

    def __init__(self, url: str, timeout_s: float = 600.0, api_key: str | None = None) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ScenarioError("URL", url, "an http(s) URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000")
        self.url, self.https, self.host = url, u.scheme == "https", u.hostname
        self.port = u.port or (443 if self.https else 80)
        base = u.path.rstrip("/")
        self.root = base[:-3] if base.endswith("/v1") else base
        self.timeout_s = timeout_s
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        """Sent with every request (never written to the observation)."""

    def connect(self, timeout_s: float | None = None) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout_s or self.timeout_s)

    def get(self, path: str, timeout_s: float = 10.0) -> tuple[int, bytes]:
        conn = self.connect(timeout_s)
        try:
            conn.request("GET", self.root + path, headers=self.headers)
            resp = conn.getresponse()
            return resp.status, resp.read(16 * 2**20)
        finally:
            conn.close()

    def get_json(self, path: str) -> Any:
        try:
            status, body = self.get(path)
            return json.loads(body) if status == 200 else None
        except (OSError, http.client.HTTPException, ValueError):
            return None

    def metrics(self) -> dict[str, float] | None:
        """The kept Prometheus samples (:data:`METRIC_KEYS`), or None where ``/metrics`` does not answer."""
        try:
            status, body = self.get("/metrics")
        except (OSError, http.client.HTTPException):
            return None
        if status != 200:
            return None
        return parse_metrics(body.decode("utf-8", errors="replace"))


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition -> ``{name{labels}: value}`` for the samples :data:`METRIC_KEYS` name."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m and any(k in m.group(1) for k in METRIC_KEYS):
            try:
                out[m.group(1)] = float(m.group(2))
            except ValueError:
                continue
    return out


def _chunk_text(choice: dict[str, Any]) -> Any:
    """What a streamed choice carries: a completion's ``text``, a chat chunk's ``delta`` content
    (or a reasoning model's ``reasoning_content``)."""
    delta = choice.get("delta") or {}
    return choice.get("text") or delta.get("content") or delta.get("reasoning_content")


def _stream(ep: Endpoint, path: str, body: dict[str, Any], rec: _Record, t0: float, clock: Callable[[], float],
            timeout_s: float) -> None:
    """Send one request to ``path`` and read its stream into ``rec`` (one clock reading per ``data:`` line)."""
    payload = json.dumps(body).encode()
    conn = ep.connect(timeout_s)
    try:
        rec.send_s = clock() - t0
        conn.request("POST", ep.root + path, payload, {"Content-Type": "application/json",
                                                        "Accept": "text/event-stream", **ep.headers})
        resp = conn.getresponse()
        if resp.status != 200:
            rec.error = f"HTTP {resp.status}: {resp.read(300).decode('utf-8', errors='replace').strip()}"
            return
        seen = 0
        server_total: int | None = None
        while True:
            raw = resp.readline()
            if not raw:
                break
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            t = clock() - t0
            data = line[5:].strip()
            if data == b"[DONE]":
                rec.end_s = t
                break
            obj = json.loads(data)
            if "error" in obj and not obj.get("choices"):
                rec.error = f"stream error: {str(obj['error'])[:300]}"
                return
            usage = obj.get("usage") or {}
            choices = obj.get("choices") or []
            if usage.get("completion_tokens") is not None:
                server_total = int(usage["completion_tokens"])
                if usage.get("prompt_tokens") is not None:
                    rec.prompt_tokens = int(usage["prompt_tokens"])
            if choices:
                k = (server_total - seen) if server_total is not None else (1 if _chunk_text(choices[0]) else 0)
                if server_total is not None:
                    rec.usage = "server"
                if k > 0:
                    seen += k
                    rec.chunk_s.append(t)
                    rec.chunk_tokens.append(k)
                    if rec.first_token_s is None:
                        rec.first_token_s = t
                rec.end_s = t
        rec.output_tokens = server_total if server_total is not None else seen
        if server_total is not None and rec.usage != "server" and seen:
            rec.usage = "server-total"   # per-chunk counts are one per chunk; the total is the server's
        if rec.first_token_s is None or rec.end_s is None:
            rec.error = "the stream ended without a token"
        else:
            rec.error = None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        conn.close()


#: The host watch's heartbeat: a separate process that sleeps :data:`HEARTBEAT_S` at a time and
#: reports each wake-up more than :data:`HOST_PAUSE_S` late, as ``start length`` seconds on
#: ``time.monotonic`` (one clock for every process of the machine): the instant it should have
#: woken and how late it woke.
HEARTBEAT_S = 0.01
HOST_PAUSE_S = 0.1
_HEARTBEAT = (
    "import sys, time\n"
    "tick, limit = float(sys.argv[1]), float(sys.argv[2])\n"
    "print('ready', flush=True)\n"
    "last = time.monotonic()\n"
    "while True:\n"
    "    time.sleep(tick)\n"
    "    now = time.monotonic()\n"
    "    if now - last - tick > limit:\n"
    "        print(f'{last + tick!r} {now - last - tick!r}', flush=True)\n"
    "    last = now\n")


class HostWatch:
    """Pauses of the client's machine during a run: a heartbeat process (:data:`_HEARTBEAT`) that
    misses its ticks by more than :data:`HOST_PAUSE_S` saw the machine stop (a virtual machine whose
    host descheduled it, or every CPU taken). Every request in flight then waits, whatever the
    server does, so a run's tail latencies include the pause (docs/calibration.md). Where the
    heartbeat cannot start, nothing is watched (the header says ``null``)."""

    def __init__(self) -> None:
        self.origin = time.monotonic()
        self.proc: subprocess.Popen[str] | None = None
        try:
            if sys.executable:
                self.proc = subprocess.Popen([sys.executable, "-c", _HEARTBEAT, repr(HEARTBEAT_S), repr(HOST_PAUSE_S)],
                                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None
        # Its interpreter's start-up is over before the run's is (a start-up beside the first sends
        # would delay them on a small machine).
        if self.proc is not None and (self.proc.stdout is None or self.proc.stdout.readline() != "ready\n"):
            self.stop()
            self.proc = None

    def start(self) -> None:
        """The run's instant 0 (its requests' times count from here)."""
        self.origin = time.monotonic()

    def stop(self) -> dict[str, Any] | None:
        """``{"heartbeat_s", "threshold_s", "pauses": [[start_s, length_s], ...]}`` with the pauses'
        starts in the run's seconds, or None where nothing was watched."""
        if self.proc is None:
            return None
        alive = self.proc.poll() is None
        self.proc.terminate()
        try:
            text, _ = self.proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            text, _ = self.proc.communicate()
        if not alive:
            return None
        pauses = []
        for line in (text or "").splitlines():
            try:
                start, length = (float(x) for x in line.split())
            except ValueError:
                continue
            if start + length > self.origin:     # not one over before the run began
                pauses.append([round(start - self.origin, 6), round(length, 6)])
        return {"heartbeat_s": HEARTBEAT_S, "threshold_s": HOST_PAUSE_S, "pauses": pauses}


def _is_local(url: str) -> bool:
    """Whether ``url`` names this machine (a loopback address or ``localhost``)."""
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _load_average() -> list[float] | None:
    """The client machine's 1, 5 and 15-minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def observe(url: str, load: Load, out: Path, *, model: str | None = None, metrics: bool = True,
            clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep,
            log: Callable[[str], None] | None = None, api_key: str | None = None,
            watch_host: bool | None = None) -> dict[str, Any]:
    """Run ``load`` against ``url`` and write the observation to ``out`` (JSON, written whole at the
    end); ``api_key``, where given, is sent as ``Authorization: Bearer`` and written nowhere.
    ``watch_host`` (default: when ``clock`` is the real one) records the client machine's pauses
    (:class:`HostWatch`). Returns the written document.

    Raises:
        ScenarioError: a bad load, an unreachable server or one that refuses the key (one line), or
            an unwritable ``out``.
    """
    load.check()
    ep = Endpoint(url, load.timeout_s, api_key)
    out = Path(out)
    if out.is_dir():
        raise ScenarioError("--out", str(out), "is a directory; give the observation file's path")
    probe = out.with_name(out.name + ".tmp")
    blocking = next((a for a in out.parents if a.exists() and not a.is_dir()), None)
    if blocking is not None:
        raise ScenarioError("--out", str(out), f"cannot be written: {blocking} is a file, not a folder; nothing "
                            "was sent")
    try:                        # before a single request goes out: a run is not lost at the end
        out.parent.mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ScenarioError("--out", str(out), f"cannot be written ({exc.strerror or exc}); nothing was "
                            "sent") from None
    try:
        status, _ = ep.get("/v1/models")
    except (OSError, http.client.HTTPException) as exc:
        raise ScenarioError("URL", url, f"cannot reach the server ({type(exc).__name__}: {exc})") from None
    if status in (401, 403):
        raise ScenarioError("--api-key-env", "given" if api_key else None,
                            f"the server answered HTTP {status} at /v1/models: "
                            + ("it refused the key" if api_key else "it wants an API key (a server started with "
                               "--api-key, or a gateway): put the key in an environment variable and name it "
                               "with --api-key-env"))
    models = ep.get_json("/v1/models")
    if model is None:
        ids = [m.get("id") for m in (models or {}).get("data", []) if isinstance(m, dict)]
        if not ids:
            raise ScenarioError("URL", url, "no model listed at /v1/models (is an OpenAI-compatible server "
                                "running there?); name it with --model")
        model = str(ids[0])
    version = ep.get_json("/version")
    before = ep.metrics() if metrics else None
    load_before = _load_average()
    if log and load_before and load_before[0] > (os.cpu_count() or 1):
        local = ("; the server runs on this machine and counts in it, so the run's check of tokens read late, "
                 "when it ends, says whether it mattered") if _is_local(url) else ""
        log(f"warning: the client machine is busy (1-minute load average {load_before[0]:.2f} on {os.cpu_count()} "
            f"CPUs): it may read the streamed tokens late, and the run then measures the client{local}")
    send, prompts, olen = load.plan()
    recs = [_Record(i, len(prompts[i]), int(olen[i])) for i in range(load.num_requests)]

    def body(i: int) -> dict[str, Any]:
        prompt: list[int] | str = prompts[i]
        if load.text_prompts:
            prompt = " ".join(WORDS[t % len(WORDS)] for t in prompts[i])
        b: dict[str, Any] = {"model": model, "max_tokens": int(olen[i]), "stream": True,
                             "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                             "temperature": 0.0}
        if load.api == "chat":
            b["messages"] = [{"role": "user", "content": prompt}]
        else:
            b["prompt"] = prompt
        if load.ignore_eos:
            b["ignore_eos"] = True
        if load.min_tokens:
            b["min_tokens"] = int(olen[i])
        return b

    slots = threading.BoundedSemaphore(MAX_IN_FLIGHT)

    def one(i: int) -> None:
        try:
            _stream(ep, API_PATHS[load.api], body(i), recs[i], t0, clock, load.timeout_s)
        finally:
            slots.release()

    # An offline burst's threads all start, and wait, before it fires: a thread started mid-burst
    # waits for the interpreter behind the streams already being read, and a burst sent so spread
    # out over a second or more on a slow machine is not a burst.
    go, cancelled = threading.Event(), threading.Event()

    def ready(i: int) -> None:
        go.wait()
        if cancelled.is_set():
            slots.release()
        else:
            one(i)

    watch = HostWatch() if (clock is time.perf_counter if watch_host is None else watch_host) else None
    try:
        threads: list[threading.Thread] = []
        date = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
        if load.arrival == "offline":
            for i in range(min(load.num_requests, MAX_IN_FLIGHT)):
                slots.acquire()
                threads.append(threading.Thread(target=ready, args=(i,), daemon=True))
                threads[-1].start()
        t0 = clock()
        if watch:
            watch.start()
        go.set()
        if load.arrival == "closed":
            assert load.concurrency is not None
            nxt = iter(range(load.num_requests))
            lock = threading.Lock()

            def client() -> None:
                while True:
                    with lock:
                        i = next(nxt, None)
                    if i is None or (load.duration_s is not None and clock() - t0 >= load.duration_s):
                        return
                    slots.acquire()
                    one(i)
            threads = [threading.Thread(target=client, daemon=True) for _ in range(min(load.concurrency,
                                                                                       load.num_requests))]
            for th in threads:
                th.start()
        else:
            for i in range(len(threads), load.num_requests):     # an offline burst: those past MAX_IN_FLIGHT
                if load.duration_s is not None and send[i] >= load.duration_s:
                    break
                if load.arrival in ("poisson", "trace"):
                    wait = send[i] - (clock() - t0)
                    if wait > 0:
                        sleep(wait)
                slots.acquire()
                th = threading.Thread(target=one, args=(i,), daemon=True)
                th.start()
                threads.append(th)
        if log:
            log(f"{load.arrival} load of up to {load.num_requests} requests under way; waiting for the responses")
        deadline = time.monotonic() + load.timeout_s + 5.0    # the wall clock bounds the run, whatever `clock` is
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))
    except BaseException:
        cancelled.set()         # an offline burst's threads still waiting end without sending
        go.set()
        if watch:
            watch.stop()
        raise
    for r in recs:
        if not math.isnan(r.send_s) and r.error is None and r.end_s is None:
            r.error = f"no complete response within {load.timeout_s:g} s"
    host = watch.stop() if watch else None
    after = ep.metrics() if metrics else None
    sent = [r for r in recs if not math.isnan(r.send_s)]
    doc = {
        "format": OBSERVATION_FORMAT, "version": OBSERVATION_VERSION,
        "header": {
            "endpoint": url, "model": model,
            "engine": {"version": (version or {}).get("version") if isinstance(version, dict) else None,
                       "models": models.get("data") if isinstance(models, dict) else None},
            "load": {**{k: v for k, v in asdict(load).items() if k not in ("prompt_tokens", "output_tokens", "trace")},
                     "prompt_tokens": str(load.prompt_tokens), "output_tokens": str(load.output_tokens),
                     "trace": None if load.trace is None else {
                         "path": load.trace.path, "format": load.trace.format, "sha256": load.trace.sha256,
                         "arrivals": load.arrival == "trace"}},
            "client": {"tool": "llmplan observe", "python": platform.python_version(), "host": socket.gethostname(),
                       "pid": os.getpid(), "clock": getattr(clock, "__name__", type(clock).__name__),
                       "cpu_count": os.cpu_count(), "load_average_before": load_before,
                       "load_average_after": _load_average(), "host_pauses": host},
            "date": date,
            "requests_sent": len(sent), "requests_failed": sum(r.error is not None for r in sent),
            "metrics_before": before, "metrics_after": after,
            "metrics_delta": ({k: after[k] - before[k] for k in after if k in before} if before and after else None),
        },
        "requests": [{"id": r.id, "send_s": r.send_s, "prompt_tokens": r.prompt_tokens, "max_tokens": r.max_tokens,
                      "output_tokens": r.output_tokens, "first_token_s": r.first_token_s, "end_s": r.end_s,
                      "chunk_s": r.chunk_s, "chunk_tokens": r.chunk_tokens, "usage": r.usage, "error": r.error}
                     for r in sent],
    }
    if not sent:
        raise ScenarioError("--duration-s", load.duration_s, "no request was sent within the duration")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(doc) + "\n")
        os.replace(tmp, out)
    except OSError as exc:
        raise ScenarioError("--out", str(out), f"cannot write the observation ({exc.strerror or exc})") from None
    failed = [r for r in sent if r.error is not None]
    if len(failed) == len(sent):
        raise ScenarioError("URL", url, f"none of the {len(sent)} requests completed (written to {out}); the "
                            f"first failed with: {failed[0].error}")
    if log:
        from simulator.workload.observation import read_observation

        for warning in read_observation(out, "--out").warnings():
            log("warning: " + warning)
    return doc
