"""The plan file: a frozen, validated description of a capacity-planning question.

A plan names a base serving scenario (a path or inline), the candidate configurations to price
(each a set of dotted scenario overrides, so any scenario lever — hardware, tensor parallelism,
``max_num_seqs``, quantisation as it lands — is a candidate dimension), the SLOs, the headroom,
the regional failover policy, the regions (client RTTs and price multipliers) and a traffic
forecast per quarter and region (inline rows or a CSV). :func:`load_plan` reads and checks all
of it up front, so a bad plan fails with one line naming the field before any simulation runs.
"""
from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from simulator.errors import FieldError, ScenarioError, check_unique_names, field_error_of
from simulator.planner.fleet_hours import plan_shapes
from simulator.planner.periods import plan_periods
from simulator.scenario.config import (
    Scenario,
    SLOConfig,
    _field_path,
    _flatten,
    load_scenario,
    scenario_from_dict,
)
from simulator.scenario.files import read_csv, read_yaml, require_file
from simulator.scenario.frozen import Frozen
from simulator.scenario.limits import (
    MAX_MODEL_LEN,
    MAX_NAME_LENGTH,
    MAX_NUM_REQUESTS,
    MAX_PEAK_RPS,
    MAX_PLAN_SEARCHES,
    MAX_REPLICAS,
    FiniteFloat,
    Integer,
    Name,
    limit_message,
)
from simulator.slo import thresholds_s


class Candidate(Frozen):
    """One serving configuration to price: dotted overrides applied to the base scenario."""

    name: Name = Field(min_length=1)
    set: dict[str, Any] = Field(default_factory=dict)
    """Scenario overrides, e.g. ``{hardware: h200, deployment.tensor_parallel_size: 2}``; with
    ``deployment.pools`` the planner sizes each pool's ``replicas``."""
    price_per_gpu_hour: FiniteFloat | None = Field(default=None, gt=0)
    """Price per GPU-hour in the plan's ``currency`` before the region's multiplier (``quoted``; with
    ``deployment.pools``, for the GPUs of every pool); default: the hardware profile's USD price (each
    pool's own; ``assumed``, only with ``currency: USD``)."""
    reserved_price_per_gpu_hour: FiniteFloat | None = Field(default=None, gt=0)
    """Price per reserved GPU-hour in the plan's ``currency`` before the region's multiplier; default:
    the on-demand price less ``pricing.reserved_discount``. At most the on-demand price."""
    price_reference: str | None = Field(default=None, max_length=200)
    """Where the prices come from (a quote, a price list and its date): written to the assumptions file."""

    @model_validator(mode="after")
    def _reserved_below_on_demand(self) -> Candidate:
        if self.reserved_price_per_gpu_hour is not None and self.price_per_gpu_hour is not None \
                and self.reserved_price_per_gpu_hour > self.price_per_gpu_hour:
            raise FieldError("reserved_price_per_gpu_hour", self.reserved_price_per_gpu_hour,
                             f"is above the on-demand price_per_gpu_hour ({self.price_per_gpu_hour:g}); a "
                             "reservation costs at most the on-demand price: check the two quotes")
        return self


class PlanSLO(SLOConfig):
    """The scenario's SLO fields (see ``simulator.slo``), held by every region, quarter and client mix;
    TTFT and E2E are client-perceived (the region's RTT included). At least one threshold is required."""

    @model_validator(mode="after")
    def _some(self) -> PlanSLO:
        if not thresholds_s(self):
            raise ValueError("give at least one threshold, e.g. ttft_p99_ms, tpot_p99_ms, e2e_p99_ms")
        return self


class Region(Frozen):
    name: Name = Field(min_length=1)
    rtt_ms: dict[str, FiniteFloat]
    """Round-trip time from this region's clients to each serving region (own region required;
    the others are needed for N+1 failover)."""
    price_multiplier: FiniteFloat = Field(default=1.0, gt=0)
    diurnal: Any = None
    """The load through a day: 24 hourly multipliers of the forecast peak (local hours 0-23, each in
    (0, 1], the busiest 1.0), a named shape (``flat``, ``office-hours``, ``consumer``), or a mapping
    ``{quarter: shape, default: shape}``; costs the hours the fleet runs
    (:mod:`simulator.planner.fleet_hours`).
    Without one the fleet is costed at its peak all day."""


class NetworkSettings(Frozen):
    """Connection model shared by all regions (see :mod:`simulator.cluster.network`)."""

    setup_round_trips: Integer = Field(default=2, ge=0)
    """Extra round trips a new connection pays before the request (TCP 1 + TLS 1.3 1 = 2)."""
    keepalive_reuse: FiniteFloat = Field(default=0.9, ge=0, le=1)
    """Fraction of requests sent on an already open (keep-alive) connection."""


class SimulationSettings(Frozen):
    """How each candidate replica count is verified."""

    num_requests: Integer = Field(default=4000, ge=200, le=MAX_NUM_REQUESTS)
    """Requests of each check's first run; a check that is not settled (no steady state yet, or its binding
    check within its noise of the limit) runs again twice as long, up to ``max_num_requests``."""
    search_all_candidates: bool = False
    """Search every candidate in every cell. Default: a candidate whose fewest possible replicas (just below
    100% of its saturation throughput) already cost more than one verified in the cell is not searched
    (``status: pruned`` in the candidates worksheet): it could not be chosen."""
    max_num_requests: Integer | None = Field(default=None, ge=200, le=MAX_NUM_REQUESTS)
    """Longest run a check may take (default: 48,000, or ``num_requests`` if more); a check still marginal
    there fails (the next count is taken)."""

    @property
    def run_cap(self) -> int:
        """``max_num_requests`` with its default filled in."""
        return self.max_num_requests if self.max_num_requests is not None else max(48000, self.num_requests)
    warmup_fraction: FiniteFloat = Field(default=0.1, ge=0, lt=0.9)
    """Leading share of the arrivals left out of the statistics (the fleet starts empty)."""
    cooldown_fraction: FiniteFloat = Field(default=0.05, ge=0, lt=0.5)
    """Trailing share of the arrivals left out (the fleet drains); with ``warmup_fraction`` below 1."""
    seed: Integer = Field(default=0, ge=0)
    max_replicas: Integer = Field(default=64, ge=1, le=MAX_REPLICAS)
    """Largest replica count tried per region; beyond it a candidate is reported infeasible."""
    replications: Integer | Literal["auto"] = "auto"
    """Independent runs (seeds ``seed``, ``seed + 1``, ...; the same at every count) that must all pass
    for a count to be accepted, so the answer does not flip with the seed. ``auto``: 3, and 8 where the
    decision is noisy (at the chosen count the worst ratio's seed-to-seed spread is above 5% and a seed two
    spreads worse would miss, or the count below passes on some seeds); ``replications`` and
    ``replications_reason`` in the worksheet say which."""

    @model_validator(mode="after")
    def _window(self) -> SimulationSettings:
        if self.max_num_requests is not None and self.max_num_requests < self.num_requests:
            raise FieldError("max_num_requests", self.max_num_requests,
                             f"is below num_requests ({self.num_requests}): a check's runs start at num_requests "
                             "and may double up to max_num_requests; give at least num_requests")
        if self.warmup_fraction + self.cooldown_fraction >= 1:
            raise FieldError("cooldown_fraction", self.cooldown_fraction,
                             f"+ warmup_fraction ({self.warmup_fraction:g}) = "
                             f"{self.warmup_fraction + self.cooldown_fraction:g} leave no arrival to measure (each "
                             "run is measured between the two); their sum must be below 1")
        return self

    @field_validator("replications", mode="before")
    @classmethod
    def _replications(cls, value: Any) -> Any:
        if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 20):
            raise ValueError("give auto or a whole number of seeds from 1 to 20")
        return value


class HostCost(Frozen):
    """Hosts the GPUs sit in, paid per host-hour (power, chassis, CPU and memory of an owned or colocated
    server; leave it out where the GPU-hour price already includes the host, as a cloud instance's does)."""

    gpus_per_host: Integer = Field(ge=1, le=64)
    price_per_host_hour: FiniteFloat = Field(ge=0)
    """In the plan's ``currency``; the region's ``price_multiplier`` does not apply."""


class EgressCost(Frozen):
    """Network egress of the responses: output tokens x ``bytes_per_output_token`` / 1e9 GB x ``price_per_gb``
    (prompts arrive as ingress, not charged)."""

    price_per_gb: FiniteFloat = Field(ge=0)
    """In the plan's ``currency`` per 10^9 bytes; the region's ``price_multiplier`` does not apply."""
    bytes_per_output_token: FiniteFloat = Field(gt=0, le=1_000_000)
    """Bytes sent per generated token: about 4 for plain text, 150-250 for streamed OpenAI-style JSON
    chunks of one token each (framing included)."""


class Pricing(Frozen):
    """How the GPU-hours are bought, and the cost lines beyond GPUs."""

    reserve: Literal["floor", "peak"] = "floor"
    """GPUs reserved for the whole period: ``floor``, the fewest the fleet runs in any hour of the day
    (the autoscaler's floor or the night trough; a fixed fleet's peak), the hours above it on demand;
    ``peak``, the peak fleet (paid all period whether used or not)."""
    reserved_discount: FiniteFloat = Field(default=0.0, ge=0, lt=1)
    """A reserved GPU-hour costs the on-demand price x (1 - discount), unless the candidate quotes
    ``reserved_price_per_gpu_hour``."""
    hosts: HostCost | None = None
    egress: EgressCost | None = None


MAX_PERIOD_HOURS = 366 * 24
"""The longest stated period: a leap year."""


class ForecastRow(Frozen):
    quarter: Name = Field(min_length=1)
    region: Name = Field(min_length=1)
    peak_rps: FiniteFloat = Field(gt=0, le=MAX_PEAK_RPS)
    avg_prompt_tokens: FiniteFloat | None = Field(default=None, ge=1, le=MAX_MODEL_LEN)
    """Mean prompt length (rescales the base scenario's prompt distribution); default: unchanged."""
    avg_output_tokens: FiniteFloat | None = Field(default=None, ge=1, le=MAX_MODEL_LEN)


class PlanConfig(Frozen):
    name: Name = Field(default="plan", max_length=MAX_NAME_LENGTH)
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    """ISO 4217 code of the prices and costs (``cost_usd``, ``usd_per_1m_tokens`` in the worksheet); a
    currency other than USD needs every candidate's ``price_per_gpu_hour`` (the profiles' prices are USD)."""
    scenario: str | dict[str, Any]
    """Base serving scenario: a YAML path (relative to the plan file) or an inline mapping."""
    candidates: list[Candidate] = Field(min_length=1)
    slo: PlanSLO
    headroom: FiniteFloat = Field(default=0.0, ge=0, le=10)
    """Extra load the fleet must carry: sized for ``peak_rps x (1 + headroom)``."""
    failover: Literal["none", "n_plus_one"] = "none"
    """``n_plus_one``: every region also carries its share of any one failed region's traffic."""
    regions: list[Region] = Field(min_length=1)
    forecast: str | list[ForecastRow]
    """Rows ``quarter, region, peak_rps[, avg_prompt_tokens, avg_output_tokens]`` or a CSV path."""
    network: NetworkSettings = NetworkSettings()
    simulation: SimulationSettings = SimulationSettings()
    fiscal_year_start_month: Integer = Field(default=1, ge=1, le=12)
    """First month of the fiscal year of ``FY`` quarter labels (FY27Q1); the year is named by the calendar
    year it ends in (:mod:`simulator.planner.periods`)."""
    period_hours: dict[str, FiniteFloat] = Field(default_factory=dict)
    """Hours of a forecast quarter stated outright (a label that names no calendar quarter, or another
    period), ``{quarter: hours}``; the others are the calendar quarter's their labels name."""
    pricing: Pricing = Pricing()
    base_dir: str = "."

    @model_validator(mode="after")
    def _cross(self) -> PlanConfig:
        check_unique_names(self.regions, "regions", "region")
        check_unique_names(self.candidates, "candidates", "candidate")
        for label, hours in self.period_hours.items():
            if not 0 < hours <= MAX_PERIOD_HOURS:
                raise FieldError(f"period_hours.{label}", hours, f"must be in (0, {MAX_PERIOD_HOURS:,}] hours "
                                 "(a period of at most a leap year)")
        return self


# -- loaded plan -----------------------------------------------------------------------------------
class LoadedPlan:
    """A checked plan: the config, the base scenario, each candidate's scenario and the forecast."""

    def __init__(self, config: PlanConfig, base: Scenario, candidates: dict[str, Scenario],
                 forecast: pd.DataFrame) -> None:
        self.config = config
        self.base = base
        self.candidate_scenarios = candidates
        self.forecast = forecast
        self.regions = {r.name: r for r in config.regions}
        self.diurnal = plan_shapes(config.regions, self.quarters)
        """``(quarter, region) -> 24 hourly multipliers of the peak``, or None (the peak all day)."""
        self.periods = plan_periods(self.quarters, config.fiscal_year_start_month, dict(config.period_hours))
        """``quarter -> Period``: its dates and hours (:mod:`simulator.planner.periods`)."""

    @property
    def quarters(self) -> list[str]:
        return list(dict.fromkeys(self.forecast["quarter"]))


def load_plan(source: str | Path | dict[str, Any], base_dir: str | Path | None = None) -> LoadedPlan:
    """Read a plan (YAML path or mapping), validate it and everything it references.

    Raises:
        ScenarioError: the first bad field, its value and what is allowed; nothing is simulated.
    """
    if isinstance(source, dict):
        data, here = dict(source), Path(base_dir or ".")
    else:
        p = Path(source)
        require_file(p, "plan", str(source), "plan file", missing="file not found")
        data = read_yaml(p, str(source), what="a plan file")
        if not isinstance(data, dict):
            raise ScenarioError(str(source), data, "a plan file must be a YAML mapping")
        here = p.resolve().parent
    data.setdefault("base_dir", str(here))
    try:
        config = PlanConfig.model_validate(data)
    except ValidationError as exc:
        raise _to_plan_error(exc, data) from None
    base = _load_base(config)
    for key, why in REPLACED.items():
        value = getattr(base, key)
        if value is not None:
            shown = [r.name for r in value.regions] if key == "fleet" else \
                value.model_dump(mode="json", exclude_unset=True) if isinstance(value, BaseModel) else value
            raise ScenarioError(f"scenario.{key}", shown, f"{why}; remove {key} from the base scenario")
    candidates, contexts = {}, {}
    for i, c in enumerate(config.candidates):
        candidates[c.name], contexts[c.name] = _candidate_scenario(base, c, i, config.currency)
    forecast = _load_forecast(config)
    searches = len(forecast) * len(config.candidates)
    if searches > MAX_PLAN_SEARCHES:
        raise ScenarioError("forecast", f"{len(forecast):,} cells x {len(config.candidates)} candidates",
                            f"a plan runs one search per cell (quarter x region) and candidate: {searches:,} "
                            f"searches, at most {MAX_PLAN_SEARCHES:,} (a limit of this simulator: see Limits in "
                            "docs/planner.md); split the plan by quarter or region, or price fewer candidates")
    _check_regions(config, forecast)
    _check_forecast_lengths(base, forecast, contexts)
    return LoadedPlan(config, base, candidates, forecast)


def _load_base(config: PlanConfig) -> Scenario:
    if isinstance(config.scenario, str):
        path = Path(config.scenario).expanduser()
        if not path.is_absolute():
            path = Path(config.base_dir) / path
        try:
            return load_scenario(path)
        except ScenarioError as exc:
            raise ScenarioError(f"scenario ({config.scenario}): {exc.field}", exc.value, exc.message) from None
    try:
        return scenario_from_dict(config.scenario, base_dir=config.base_dir)
    except ScenarioError as exc:
        raise ScenarioError(f"scenario.{exc.field}", exc.value, exc.message) from None


REPLACED = {
    "network": "the plan gives the client network (regions[].rtt_ms, and network for the connection set-up)",
    "fleet": "the plan's regions and forecast replace a multi-region fleet (one region per cell)",
    "max_sim_time_s": "the planner runs every simulation until its last request ends (a request the clock cut "
                      "off would count as a miss)",
}
"""Scenario fields the plan replaces and a cell would drop: set in the base scenario (or a candidate), an error."""


def _candidate_scenario(base: Scenario, cand: Candidate, index: int, currency: str = "USD") -> tuple[Scenario, int]:
    """The candidate's scenario and the longest request (prompt + output) it serves, ``max_model_len``."""
    from simulator.run.resolve import resolve

    where = f"candidates[{index}] ({cand.name})"
    for key in cand.set:
        if key.split(".")[0] in ("workload", "num_requests", "duration_s", "seed", "slo", "warmup_s",
                                 "cooldown_s", "max_sim_time_s"):
            raise ScenarioError(f"{where}.set.{key}", cand.set[key],
                                "the planner sets traffic, seed, run length and SLO itself; "
                                "a candidate may change the serving system only")
        if key.split(".")[0] in ("network", "fleet"):
            raise ScenarioError(f"{where}.set.{key}", cand.set[key],
                                "the plan's regions (client RTTs, failover) replace the scenario's network "
                                "and fleet; a candidate may change the serving system only")
    counts = _replica_counts(cand.set)
    if counts:
        key, value = counts[0]
        raise ScenarioError(f"{where}.set.{key}", value, "the planner searches every candidate's replica count "
                            "(with deployment.pools, each pool's), from 1 to simulation.max_replicas; leave it out "
                            "(deployment.autoscaler.min_replicas sets a floor the fleet pays)")
    try:
        sc = base.with_overrides(dict(cand.set))
    except ScenarioError as exc:
        raise ScenarioError(f"{where}.set.{exc.field}", exc.value, exc.message) from None
    try:
        system = resolve(sc)
    except ScenarioError as exc:
        raise ScenarioError(f"{where}: {exc.field}", exc.value, exc.message) from None
    # With model pools every pool's GPUs are priced: by the candidate's quote, else by each pool's profile.
    pools = [(f" (pool {p.name})", s.profile) for p, (_, s) in zip(sc.deployment.pools or (), system.pools,
                                                                    strict=True)] or [("", system.profile)]
    for pool, profile in pools:
        if cand.price_per_gpu_hour is None and profile.price_per_gpu_hour is None:
            raise ScenarioError(f"{where}.price_per_gpu_hour", None,
                                f"hardware profile {profile.name!r}{pool} has no price; give one")
        reserved = cand.reserved_price_per_gpu_hour
        if cand.price_per_gpu_hour is None and reserved is not None and profile.price_per_gpu_hour is not None \
                and reserved > profile.price_per_gpu_hour:
            raise ScenarioError(f"{where}.reserved_price_per_gpu_hour", reserved,
                                f"is above hardware profile {profile.name!r}{pool}'s on-demand price "
                                f"({profile.price_per_gpu_hour:g}); a reservation costs at most the on-demand "
                                "price: quote price_per_gpu_hour too, or check the reserved price")
        if cand.price_per_gpu_hour is None and currency != "USD":
            raise ScenarioError(f"{where}.price_per_gpu_hour", None,
                                f"the plan's currency is {currency} but hardware profile {profile.name!r}{pool} "
                                f"has an assumed USD price; quote this candidate's price in {currency}")
    return sc, system.max_model_len


def _replica_counts(overrides: dict[str, Any]) -> list[tuple[str, Any]]:
    """The replica counts a candidate's overrides set, as (dotted key, value): ``deployment.replicas``, or
    ``replicas`` of a ``deployment.pools`` entry, however the keys are nested."""
    found: list[tuple[str, Any]] = []

    def walk(key: str, value: Any) -> None:
        if key == "deployment.replicas" or (key.startswith("deployment.pools.") and key.endswith(".replicas")):
            found.append((key, value))
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(f"{key}.{k}", v)
        elif key == "deployment.pools" and isinstance(value, list):
            for i, pool in enumerate(value):
                walk(f"{key}.{i}", pool)

    for key, value in overrides.items():
        walk(str(key), value)
    return found


FORECAST_COLUMNS = ("quarter", "region", "peak_rps", "avg_prompt_tokens", "avg_output_tokens")


def _load_forecast(config: PlanConfig) -> pd.DataFrame:
    if not isinstance(config.forecast, str):
        rows = [r.model_dump() for r in config.forecast]
        if not rows:
            raise ScenarioError("forecast", [], "needs at least one row")
        return pd.DataFrame(rows, columns=list(FORECAST_COLUMNS))
    path = Path(config.forecast).expanduser()
    if not path.is_absolute():
        path = Path(config.base_dir) / path
    require_file(path, "forecast", config.forecast, "forecast CSV", missing="CSV file not found")
    # Only an empty cell is missing: "nan" is a value (refused as not finite) and "NA" may be a region.
    raw = read_csv(path, "forecast", dtype={"quarter": str, "region": str}, keep_default_na=False, na_values=[""])
    unknown = [c for c in raw.columns if c not in FORECAST_COLUMNS]
    if unknown:
        hint = difflib.get_close_matches(str(unknown[0]), FORECAST_COLUMNS, n=1)
        raise ScenarioError(f"{path.name} column", unknown[0], "unknown column" +
                            (f" (did you mean {hint[0]!r}?)" if hint else "")
                            + f"; allowed: {', '.join(FORECAST_COLUMNS)}")
    missing = [c for c in ("quarter", "region", "peak_rps") if c not in raw.columns]
    if missing:
        raise ScenarioError(f"{path.name}", ",".join(map(str, raw.columns)),
                            f"missing column(s) {', '.join(missing)}; expected {', '.join(FORECAST_COLUMNS)}")
    if raw.empty:
        raise ScenarioError("forecast", config.forecast, "CSV has no rows")
    rows = []
    for i, rec in enumerate(raw.to_dict("records")):
        clean = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in rec.items()}
        try:
            rows.append(ForecastRow.model_validate(clean).model_dump())
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            col = str(err["loc"][0]) if err["loc"] else "row"
            msg = "required value is missing" if err["type"] in ("missing", "string_type", "float_type") \
                and clean.get(col) is None else limit_message(err, ForecastRow) or err["msg"]
            raise ScenarioError(f"{path.name} row {i + 2} column {col}", clean.get(col), msg) from None
    return pd.DataFrame(rows, columns=list(FORECAST_COLUMNS))


def _forecast_row(config: PlanConfig, i: int, column: str | None = None) -> str:
    """Where forecast row ``i`` (from 0) stands: ``f.csv row N`` as a spreadsheet numbers it (the
    header is row 1), or ``forecast[i]`` in the plan; with its ``column``."""
    if isinstance(config.forecast, str):
        return f"{Path(config.forecast).name} row {i + 2}" + (f" column {column}" if column else "")
    return f"forecast[{i}]" + (f".{column}" if column else "")


def _check_regions(config: PlanConfig, forecast: pd.DataFrame) -> None:
    known = [r.name for r in config.regions]
    for i, region in enumerate(forecast["region"]):
        if region not in known:
            hint = difflib.get_close_matches(str(region), known, n=1)
            raise ScenarioError(_forecast_row(config, i, "region"), region, "unknown region" +
                                (f" (did you mean {hint[0]!r}?)" if hint else "") + f"; regions: {', '.join(known)}")
    dup = forecast.duplicated(["quarter", "region"])
    if dup.any():
        i = int(dup.to_numpy().nonzero()[0][0])
        first = int(((forecast["quarter"] == forecast["quarter"][i])
                     & (forecast["region"] == forecast["region"][i])).to_numpy().nonzero()[0][0])
        raise ScenarioError(_forecast_row(config, i), f"{forecast['quarter'][i]} {forecast['region'][i]}",
                            f"quarter and region appear twice (also {_forecast_row(config, first)})")
    quarters = list(dict.fromkeys(forecast["quarter"]))
    have = set(zip(forecast["quarter"], forecast["region"], strict=True))
    for q in quarters:
        for name in known:
            if (q, name) not in have:
                raise ScenarioError(f"forecast (quarter {q}, region {name})", None,
                                    f"missing row: every region of regions ({', '.join(known)}) needs one "
                                    f"row in every quarter of the forecast ({', '.join(map(str, quarters))})")
    for j, r in enumerate(config.regions):
        if r.name not in r.rtt_ms:
            raise ScenarioError(f"regions[{j}] ({r.name}).rtt_ms", r.rtt_ms,
                                f"needs the RTT from {r.name}'s clients to {r.name} itself")
        bad = [k for k in r.rtt_ms if k not in known]
        if bad:
            raise ScenarioError(f"regions[{j}] ({r.name}).rtt_ms.{bad[0]}", bad[0],
                                f"unknown region; regions: {', '.join(known)}")
        neg = [k for k, v in r.rtt_ms.items() if not v >= 0]
        if neg:
            raise ScenarioError(f"regions[{j}] ({r.name}).rtt_ms.{neg[0]}", r.rtt_ms[neg[0]], "must be >= 0")
    if config.failover == "n_plus_one":
        if len(known) < 2:
            raise ScenarioError("failover", "n_plus_one", "needs at least two regions")
        for j, r in enumerate(config.regions):
            lacking = [k for k in known if k not in r.rtt_ms]
            if lacking:
                raise ScenarioError(f"regions[{j}] ({r.name}).rtt_ms", r.rtt_ms,
                                    f"failover n_plus_one needs the RTT to every region; missing {', '.join(lacking)}")


RESCALED = {"prompt_tokens": "avg_prompt_tokens", "output_tokens": "avg_output_tokens"}
"""The base scenario's length distributions and the forecast columns whose mean they take."""


def _check_forecast_lengths(base: Scenario, forecast: pd.DataFrame, contexts: dict[str, int]) -> None:
    """Refuse a forecast mean length the cell could not simulate: a base distribution that cannot be
    rescaled (uniform, empirical), a mean outside the distribution's ``[min, max]`` (its draws stay inside,
    so the simulated mean would differ from the one costed), or a mean request (prompt + output) longer than
    a candidate's ``max_model_len`` (``contexts``, by candidate name)."""
    from simulator.workload.lengths import make_length

    base_means: dict[str, float] = {}
    for row in forecast.to_dict("records"):
        where = f"forecast (quarter {row['quarter']}, region {row['region']})"
        given = {key: float(row[col]) for key, col in RESCALED.items()
                 if row.get(col) is not None and not (isinstance(row[col], float) and math.isnan(row[col]))}
        for key, mean in given.items():
            dist, field = getattr(base.workload, key), f"{where}.{RESCALED[key]}"
            if dist is None:
                continue        # trace lengths: the planner refuses trace arrivals when it builds the cells
            if dist.dist not in ("lognormal", "geometric", "fixed"):
                raise ScenarioError(field, mean, f"cannot rescale the base scenario's {dist.dist} distribution "
                                    f"(workload.{key}); use lognormal, geometric or fixed lengths in the base "
                                    "scenario, or leave the column empty")
            hi, lo = getattr(dist, "max", None), getattr(dist, "min", None)
            if hi is not None and mean >= hi:
                raise ScenarioError(field, mean, f"must be below the base scenario's workload.{key}.max={hi:,}: "
                                    "lengths are drawn up to it, so the simulated mean would stay below the "
                                    f"one costed; raise workload.{key}.max or lower the forecast")
            if lo is not None and mean <= lo:
                raise ScenarioError(field, mean, f"must be above the base scenario's workload.{key}.min={lo:,}: "
                                    "lengths are drawn from it up, so the simulated mean would stay above the "
                                    f"one costed; lower workload.{key}.min or raise the forecast")
        if not given:
            continue
        means = {}
        for key in RESCALED:
            if key not in given and key not in base_means:
                dist = getattr(base.workload, key)
                try:
                    base_means[key] = make_length(dist, base, f"workload.{key}").mean if dist is not None else 0.0
                except ScenarioError as exc:   # an empirical length file that cannot be read
                    raise ScenarioError(f"scenario.{exc.field}", exc.value, exc.message) from None
            means[key] = given.get(key, base_means.get(key, 0.0))
        total = sum(means.values())
        shortest = min(contexts, key=lambda name: contexts[name])
        if total > contexts[shortest]:
            parts = " + ".join(f"{means[k]:,.6g} {k.split('_')[0]}" + ("" if k in given else " (the base scenario's)")
                               for k in RESCALED)
            raise ScenarioError(where, {RESCALED[k]: v for k, v in given.items()},
                                f"the mean request, {parts} = {total:,.6g} tokens, is longer than candidate "
                                f"{shortest}'s max_model_len={contexts[shortest]:,} (prompt + output must fit); "
                                "lower the forecast, or give the candidates a longer context")


# -- errors ----------------------------------------------------------------------------------------
def _to_plan_error(exc: ValidationError, data: dict[str, Any]) -> ScenarioError:
    errors = exc.errors(include_url=False)
    # For "str | list[...]" unions pydantic reports every branch: a type mismatch of one branch is
    # less telling than a field error inside the other.
    errors.sort(key=lambda e: (e["type"].endswith("_type") and isinstance(e.get("input"), (dict, list)),
                               len(e["loc"])))
    err = errors[0]
    loc = [p for p in _field_path(err["loc"]) if not (isinstance(p, str) and "[" in p)]
    value, msg = err.get("input"), err["msg"]
    named = field_error_of(err)
    if named is not None:    # a check across fields named the one at fault, relative to its model
        loc += [int(p) if p.isdigit() else p for p in named.field.split(".")]
        value, msg = named.value, named.message
    field = ""
    for part in loc:
        field += f"[{part}]" if isinstance(part, int) else (f".{part}" if field else str(part))
    field = field or "plan"
    if named is not None:
        return ScenarioError(field, value, msg)
    if err["type"] == "extra_forbidden":
        model = _model_at([p for p in loc[:-1] if not isinstance(p, int)])
        allowed = sorted(k for k in model.model_fields if k != "base_dir") if model else []
        hint = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        msg = "unknown field" + (f" (did you mean {hint[0]!r}?)" if hint else "")
        if allowed:
            msg += f"; allowed: {', '.join(allowed)}"
    elif err["type"] == "missing":
        value, msg = None, "required field is missing"
    elif err["type"] == "literal_error":
        msg = f"not allowed; allowed: {err.get('ctx', {}).get('expected', '')}"
    elif err["type"] == "string_pattern_mismatch" and loc == ["currency"]:
        msg = "must be an ISO 4217 code in capitals, e.g. USD, EUR, GBP"
    elif limit_message(err, PlanConfig):
        msg = str(limit_message(err, PlanConfig))
    elif err["type"] == "value_error":
        msg = msg.removeprefix("Value error, ")
    return ScenarioError(field, value, msg)


def _model_at(loc: list[str]) -> type[BaseModel] | None:
    model: Any = PlanConfig
    for part in loc:
        field = model.model_fields.get(part)
        if field is None:
            return None
        found = [a for a in _flatten(field.annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not found:
            args = getattr(field.annotation, "__args__", ())
            found = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if len(found) != 1:
            return None
        model = found[0]
    return model
