"""Hardware profiles: what one GPU (or CPU) can do, and where the numbers came from.

A profile lives in ``hwprofiles/<name>/profile.yaml`` (measured ones add per-op tables beside it).
Every profile says its ``source``: ``datasheet`` (vendor peak numbers with assumed efficiencies),
``measured`` (our calibration on the device), ``imported`` (someone else's measurements),
``fitted`` (a profile's costs fitted to a real engine's observed runs, ``calibrate --from-observation``)
or ``inline`` (written in a scenario). The simulator reads profiles; it never imports torch.
"""
from __future__ import annotations

import difflib
import functools
import math
import os
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from simulator.arguments import check_name, check_path
from simulator.errors import FieldError, ScenarioError, field_error_of
from simulator.scenario.files import read_yaml, require_file
from simulator.scenario.frozen import Frozen
from simulator.scenario.limits import MIN_DEVICE_RATE, MIN_EFFICIENCY, FiniteFloat, Integer, Name, limit_message

GIB = 1024**3

#: The compute dtypes ``peak_flops`` may give a peak for: the model dtypes (``ModelSpec.dtype``), the
#: quantizations' compute dtypes (``fp4`` for mxfp4) and ``tf32`` (a datasheet figure, shown only).
PEAK_FLOPS_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4", "int4")


class Interconnect(Frozen):
    """The link tensor-parallel all-reduces run over."""

    name: str = "unknown"
    bandwidth_bytes_per_s: FiniteFloat = Field(ge=MIN_DEVICE_RATE)
    """Per-direction bandwidth per GPU (what a ring all-reduce's bus bandwidth approaches)."""
    latency_s: FiniteFloat = Field(default=5e-6, ge=0)
    """Fixed cost of one collective call (launch + synchronisation)."""
    domain_gpus: Integer = Field(default=8, ge=1)
    """GPUs the link joins directly (an HGX or MI300X board: 8; a GB200 NVL72 rack: 72). A replica
    with more GPUs than this needs the profile's ``inter_node`` link."""
    topology: Literal["switch", "mesh"] = "switch"
    """``switch`` (NVSwitch): every GPU reaches any group at ``bandwidth_bytes_per_s``; ``mesh``
    (AMD Infinity Fabric): one direct link per peer, so a group of ``g`` GPUs uses ``g - 1`` of the
    ``domain_gpus - 1`` links and ``bandwidth_bytes_per_s`` is the whole domain's figure."""

    def group_bandwidth_bytes_per_s(self, group_gpus: int) -> float:
        """Per-GPU, per-direction bandwidth a collective over ``group_gpus`` GPUs of one domain
        reaches (a point-to-point send: ``group_gpus`` = 2)."""
        if self.topology == "switch" or self.domain_gpus <= 1:
            return self.bandwidth_bytes_per_s
        return self.bandwidth_bytes_per_s * (min(group_gpus, self.domain_gpus) - 1) / (self.domain_gpus - 1)


class Efficiency(Frozen):
    """Fractions of peak a real kernel reaches (roofline cost model).

    GEMM compute efficiency rises with the token count ``T`` of the step as
    ``gemm_max * T / (T + gemm_half_tokens)``: tiny GEMMs cannot fill the device.
    """

    gemm_max: FiniteFloat = Field(default=0.75, ge=MIN_EFFICIENCY, le=1)
    gemm_half_tokens: FiniteFloat = Field(default=64.0, ge=0)
    memory: FiniteFloat = Field(default=0.80, ge=MIN_EFFICIENCY, le=1)
    """Fraction of peak memory bandwidth streaming kernels (weights, norms) reach."""
    attention_compute: FiniteFloat = Field(default=0.50, ge=MIN_EFFICIENCY, le=1)
    attention_memory: FiniteFloat = Field(default=0.70, ge=MIN_EFFICIENCY, le=1)
    """Fraction of bandwidth decode attention reaches while reading the KV cache."""
    kernel_latency_s: float = Field(default=0.0, ge=0)
    """Fixed GPU time of one kernel (launch and tail) on top of its roofline time: the per-kernel
    latency floor. The ``roofline`` cost model adds it once per kernel a step runs (the kernels
    each layer runs, counted in :mod:`simulator.cost.analytic`); the ``table`` and ``kernel_table``
    models add it to each op they have no rows for (measured rows carry their own floor). 0 turns
    the floor off."""


class Overhead(Frozen):
    """Engine time that is not GPU kernels: scheduling, input preparation, sampling, detokenising."""

    step_s: FiniteFloat = Field(default=0.0015, ge=0)
    """Fixed CPU cost of every engine step."""
    per_seq_s: FiniteFloat = Field(default=1.0e-5, ge=0)
    """Extra cost per request in the step (bookkeeping, sampling, output processing)."""
    per_token_s: FiniteFloat = Field(default=0.0, ge=0)
    """Extra cost per token computed in the step (input preparation, gathers, cache copies); 0
    unless measured on a real engine (``llmplan validate`` fits it)."""
    frontend_s: FiniteFloat | None = Field(default=None, ge=0, le=60)
    """The engine's front end per request, outside the engine loop: the API server's HTTP handling,
    chat template, tokenisation and streaming as a client times them. Added to every request's
    TTFT and E2E (the request reaches the engine that much after it is sent). None: the engine
    preset's measured figure (``docs/engines.md``), 0 where it has none. ``llmplan calibrate
    --from-observation`` fits it to a real engine's runs."""
    async_scheduling: bool = False
    """The CPU work of a step overlaps the GPU work of the previous one (vLLM's
    ``--async-scheduling``; set through ``engine.async_scheduling``): a step takes the longer of
    the two instead of their sum. Not used by the ``constant`` cost model."""


class HardwareProfile(Frozen):
    """One accelerator as the cost model sees it.

    ``cost_model`` picks the step-time model (``roofline`` or ``constant``). The roofline needs
    memory, bandwidth and peak FLOP/s; ``constant`` needs only ``step_time_s`` (and optionally
    ``prefill_time_per_token_s``), which makes queueing theory checks exact.
    """

    name: Name = "inline"
    source: Literal["datasheet", "measured", "imported", "fitted", "inline"] = "inline"
    device: str = ""
    cost_model: str = "roofline"
    memory_bytes: FiniteFloat | None = Field(default=None, gt=0)
    """Device memory as the driver reports it (``torch.cuda.mem_get_info`` total)."""
    memory_bandwidth_bytes_per_s: FiniteFloat | None = Field(default=None, ge=MIN_DEVICE_RATE)
    peak_flops: dict[str, Annotated[FiniteFloat, Field(ge=MIN_DEVICE_RATE)]] = Field(default_factory=dict)
    """Dense peak FLOP/s per compute dtype, one of :data:`PEAK_FLOPS_DTYPES` (``{bf16: 9.89e14, fp8: 1.98e15}``)."""
    interconnect: Interconnect | None = None
    inter_node: Interconnect | None = None
    """The scale-out link between interconnect domains (InfiniBand or RoCE, per GPU, one
    direction), used by replicas spanning more than ``interconnect.domain_gpus`` GPUs; None: such
    replicas are refused."""
    host_link_bandwidth_bytes_per_s: FiniteFloat | None = Field(default=None, ge=MIN_DEVICE_RATE)
    """Device-host link, one direction (PCIe); what swapping KV to host memory runs at."""
    price_per_gpu_hour: FiniteFloat | None = Field(default=None, ge=0)
    """USD per GPU-hour used for cost figures (an assumption unless the profile says otherwise)."""
    efficiency: Efficiency = Efficiency()
    overhead: Overhead = Overhead()
    non_torch_memory_bytes: FiniteFloat = Field(default=1.0 * GIB, ge=0)
    """Memory the engine cannot use for tensors: CUDA context, NCCL buffers, CUDA graphs."""
    step_time_s: FiniteFloat | None = Field(default=None, gt=0)
    """``constant`` cost model: every engine step takes this long."""
    prefill_time_per_token_s: FiniteFloat = Field(default=0.0, ge=0)
    """``constant`` cost model: added per prompt token computed in the step."""
    provenance: dict[str, Any] = Field(default_factory=dict)
    """Where the numbers came from: documents, dates, measurement details, assumptions."""
    table: str | None = None
    """``table`` cost model: the per-op CSV (:mod:`simulator.cost.op_table`), relative to the profile's
    folder; :func:`load_profile` makes it absolute."""
    table_sha256: str | None = None
    """Checksum of ``table`` as written; a mismatch on load means the file was edited or corrupted."""
    table_schema: Integer | None = None
    """Version of the table's columns (:data:`simulator.cost.op_table.TABLE_SCHEMA`)."""

    @field_validator("peak_flops", mode="before")
    @classmethod
    def _peak_dtypes(cls, value: Any) -> Any:
        # An unknown key (a typo: bf17) would be ignored and the model served at another dtype's peak.
        if not isinstance(value, dict):
            raise ValueError("must be a mapping of compute dtype to dense peak FLOP/s, e.g. "
                             f"{{bf16: 9.89e14, fp8: 1.98e15}}; dtypes: {', '.join(PEAK_FLOPS_DTYPES)}")
        for key, peak in value.items():
            if key not in PEAK_FLOPS_DTYPES:
                hint = difflib.get_close_matches(str(key), PEAK_FLOPS_DTYPES, n=1)
                raise FieldError(str(key), peak, "unknown compute dtype" + (f" (did you mean {hint[0]!r}?)" if hint
                                                                          else "")
                                 + f"; allowed: {', '.join(PEAK_FLOPS_DTYPES)}")
        return value

    @model_validator(mode="after")
    def _complete(self) -> HardwareProfile:
        needed = {"constant": ["step_time_s"],
                  "roofline": ["memory_bytes", "memory_bandwidth_bytes_per_s", "peak_flops"],
                  "table": ["table", "memory_bytes"], "kernel_table": ["table", "memory_bytes"]}
        missing = [f for f in needed.get(self.cost_model, []) if getattr(self, f) in (None, {})]
        if missing:
            raise FieldError(missing[0], getattr(self, missing[0]), f"cost_model {self.cost_model!r} needs "
                             f"{', '.join(missing)}")
        return self

    def basis(self) -> str:
        """What this profile's step costs rest on, in a sentence a plan can quote beside its numbers:
        its ``source``, and for a fitted profile the engine observed and the fit's median absolute
        error on held-out runs (``provenance.holdout_error_median_abs``) and, where it was fitted with
        ``--leave-one-out``, the cost that one run left out moved most, and by how much."""
        prov = self.provenance
        if self.source == "datasheet":
            return ("datasheet: vendor peak FLOP/s and bandwidth at assumed efficiencies, a roofline "
                    "(optimistic at small batches; docs/hardware-profiles.md)")
        if self.source == "measured":
            return ("measured: torch kernels timed on the device (a serving engine's own kernels and CPU "
                    "time differ: fit them to it, docs/calibration.md#fitting-a-real-engine)")
        if self.source == "imported":
            origin = str(prov.get("imported_from") or "see its provenance")
            origin = origin.split(",")[0] if len(origin) > 80 else origin       # a wheel's name and checksum
            return f"imported: kernels measured elsewhere ({origin}), not this deployment's engine"
        if self.source == "fitted":
            engine = prov.get("engine")
            engine = engine if isinstance(engine, dict) else {}
            what = " ".join(str(v) for v in (engine.get("preset"), engine.get("version")) if v) or "an engine"
            held = prov.get("holdout_error_median_abs") or {}
            errs = ", ".join(f"{k.replace('_', ' ')} {100 * v:.0f}%" for k in ("ttft_p50", "tpot_p50", "throughput")
                             if isinstance(v := held.get(k), (int, float)))
            loo = prov.get("leave_one_out")
            costs = loo.get("costs") if isinstance(loo, dict) else None
            moves = [(abs(math.log(c[k] / c["value"])), n) for n, c in costs.items() for k in ("min", "max")
                     if isinstance(c, dict) and all(isinstance(c.get(j), (int, float)) and c[j] > 0
                                                    for j in ("value", k))] if isinstance(costs, dict) else []
            most = max(moves, default=None)
            return (f"fitted to {what}'s observed runs ({len(prov.get('runs') or [])})"
                    + (f"; held-out median |error|: {errs}" if errs else "; no held-out runs")
                    + (f"; leaving out one run moves {most[1]} by up to {100 * (math.exp(most[0]) - 1):.0f}%"
                       if most else ""))
        return "inline: numbers written in the scenario"

    def peak_flops_for(self, dtype: str) -> float:
        """Peak dense FLOP/s for ``dtype``, falling back to bf16/fp16 (weight-only quantisation
        computes in 16-bit)."""
        for key in (dtype, "bf16", "fp16", "fp32"):
            if key in self.peak_flops:
                return self.peak_flops[key]
        raise ScenarioError("hardware.peak_flops", self.peak_flops, f"no entry usable for dtype {dtype!r}")


def profile_search_dirs() -> list[Path]:
    """Where profile names are looked up, first match wins: ``$LLMPLAN_PROFILES`` (colon-separated),
    ``./hwprofiles``, then the profiles shipped with the package."""
    dirs = [Path(p) for p in os.environ.get("LLMPLAN_PROFILES", "").split(os.pathsep) if p]
    dirs.append(Path.cwd() / "hwprofiles")
    dirs.append(_packaged_dir())
    return dirs


def _packaged_dir() -> Path:
    import hwprofiles

    if getattr(hwprofiles, "__file__", None):
        return Path(hwprofiles.__file__).parent
    return Path(str(next(iter(resources.files("hwprofiles")._paths))))  # type: ignore[attr-defined]


def available_profiles() -> dict[str, Path]:
    """Profile name -> its ``profile.yaml``, over all search directories."""
    found: dict[str, Path] = {}
    for d in profile_search_dirs():
        if d.is_dir():
            for f in sorted(d.glob("*/profile.yaml")):
                found.setdefault(f.parent.name, f)
    return found


def load_profile(ref: str | dict[str, Any] | HardwareProfile, field: str = "hardware",
                 base_dir: str | Path = ".") -> HardwareProfile:
    """Resolve a scenario's ``hardware`` value: a profile name, a path to a profile (its folder or
    its ``profile.yaml``), or an inline mapping.

    Raises:
        ScenarioError: unknown name (listing the known ones) or an invalid profile.
    """
    check_name("field", field)
    base_dir = check_path("base_dir", base_dir, "a folder path")
    if isinstance(ref, HardwareProfile):
        return ref
    if isinstance(ref, dict):
        return _validate(ref, field)
    check_path(field, ref, "a profile name, a path to a profile, a mapping or a HardwareProfile")
    ref = os.fspath(ref)   # as given (a Path would drop a trailing slash from the messages)
    path = _find(ref, base_dir)
    if path is None:
        known = ", ".join(sorted(available_profiles())) or "none"
        for cand in (Path(ref), Path(base_dir) / ref):   # something is there, but not a profile
            if cand.is_dir():
                raise ScenarioError(field, ref, "a directory without a profile.yaml, not a hardware profile folder; "
                                    f"known profiles: {known}")
            if cand.exists():
                require_file(cand, field, ref, "hardware profile (profile.yaml)")
        raise ScenarioError(field, ref, f"no such hardware profile; known: {known} (or give a path)")
    try:
        stat = path.stat()
    except OSError:      # gone since _find: read_yaml says so
        return _profile_file(path, field, -1, -1)
    return _profile_file(path, field, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _profile_file(path: Path, field: str, mtime_ns: int, size: int) -> HardwareProfile:
    """The profile in the file at ``path`` as it was at ``mtime_ns`` and ``size``: read once per process
    while the file is unchanged (every simulation resolves its profile; the planner runs hundreds)."""
    data = read_yaml(path, f"{field} ({path})", what="a hardware profile")
    if not isinstance(data, dict):
        raise ScenarioError(field, str(path), "profile must be a YAML mapping")
    data.setdefault("name", path.parent.name)
    if isinstance(data.get("table"), str) and not Path(data["table"]).is_absolute():
        data["table"] = str(path.parent / data["table"])
    return _validate(data, f"{field} ({path})")


#: Left in a calibration folder until the run completes (see ``calibrate.runner``).
PARTIAL_TABLE = "ops.partial.csv"


def _find(ref: str, base_dir: str | Path) -> Path | None:
    for cand in (Path(ref), Path(base_dir) / ref):
        if cand.is_file():
            return cand
        if (cand / "profile.yaml").is_file():
            return cand / "profile.yaml"
        if (cand / PARTIAL_TABLE).is_file():
            raise ScenarioError("hardware", ref, "an interrupted calibration (partial results, no profile.yaml); "
                                f"finish it with `llmplan calibrate ... --out {cand}` (it resumes)")
    return available_profiles().get(ref)


def _validate(data: dict[str, Any], field: str) -> HardwareProfile:
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"])
        where = f"{field}.{loc}" if loc else field
        named = field_error_of(err)
        if named is not None:    # a check across fields named the one at fault, relative to its model
            raise ScenarioError(f"{where}.{named.field}", named.value, named.message) from None
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown field; allowed: {', '.join(sorted(HardwareProfile.model_fields))}"
        msg = limit_message(err, HardwareProfile) or msg
        return_value = err.get("input") if err["type"] != "missing" else None
        raise ScenarioError(where, return_value, msg) from None
