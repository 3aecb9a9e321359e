"""What every importer shares: a row of our per-op table, one row per shape, and the imported profile
written (the table and ``profile.yaml`` on top of the GPU's datasheet profile, with provenance)."""
from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from simulator.cost.op_table import TABLE_COLUMNS, TABLE_SCHEMA, file_sha256, written_columns
from simulator.scenario.profiles import load_profile


def op_row(op: str, family: str, dtype: str, median_s: float, p10_s: float = np.nan, p90_s: float = np.nan,
         std_s: float = np.nan, repeats: int = 0, **shape: int) -> dict[str, Any]:
    row: dict[str, Any] = {c: 0 for c in TABLE_COLUMNS}
    row.update(op=op, family=family, dtype=dtype, median_s=median_s, p10_s=p10_s, p90_s=p90_s, std_s=std_s,
               repeats=repeats)
    row.update({k: int(v) for k, v in shape.items()})
    return row



def dedupe_shapes(table: pd.DataFrame) -> pd.DataFrame:
    """One row per shape (the same GEMM shape may come from several models): the median time."""
    keys = ["op", "family", "dtype", "tokens", "n", "k", "batch", "context", "num_heads", "num_kv_heads",
            "head_dim", "width", "message_bytes", "world_size", "num_experts", "top_k", "weight_bits"]
    agg = {"median_s": "median", "p10_s": "min", "p90_s": "max", "std_s": "max", "repeats": "sum"}
    return table.groupby(keys, as_index=False, sort=False).agg(agg)[list(TABLE_COLUMNS)]


def write_profile(out: Path, name: str, base_profile: str, table: pd.DataFrame, prov: dict[str, Any],
           cost_model: str = "table", efficiency: dict[str, float] | None = None,
           header: str | None = None, table_file: str = "ops.csv") -> Path:
    """``table_file`` (``ops.csv``, or ``ops.csv.gz``: gzip without a timestamp, so the same table
    gives the same bytes) and ``profile.yaml`` into ``out`` (each written under a temporary name,
    then renamed): the base profile's numbers with the table, ``source: imported``, the provenance
    and, when given, efficiencies that replace the base's assumed ones. A table of the other name
    left in ``out`` by an earlier import is removed."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (table_file + ".tmp")
    cols = written_columns(table)
    if table_file.endswith(".gz"):
        table[cols].to_csv(tmp, index=False, float_format="%.6g", compression={"method": "gzip", "mtime": 0})
    else:
        table[cols].to_csv(tmp, index=False, float_format="%.6g")
    os.replace(tmp, out / table_file)
    for stale in ("ops.csv", "ops.csv.gz"):
        if stale != table_file and (out / stale).is_file():
            (out / stale).unlink()
    base = load_profile(base_profile)
    data = base.model_dump(mode="json", exclude_none=True)
    data.update(name=name, source="imported", cost_model=cost_model, table=table_file,
                table_sha256=file_sha256(out / table_file), table_schema=TABLE_SCHEMA)
    if efficiency:
        data["efficiency"] = {**data.get("efficiency", {}), **efficiency}
    kept = "efficiencies fitted to the rows (provenance.roofline_fit)" if efficiency else \
        "efficiencies for ops without rows"
    data["provenance"] = {**prov, "base_profile": f"{base_profile} (datasheet: memory, peaks, interconnect, price, "
                                                  f"engine overhead; {kept})",
                          "date": _dt.date.today().isoformat(), "rows": len(table)}
    tmp = out / "profile.yaml.tmp"
    head = header or f"# Imported per-op measurements (see provenance); base numbers from {base_profile}.\n"
    tmp.write_text(head + yaml.safe_dump(data, sort_keys=False, width=110))
    os.replace(tmp, out / "profile.yaml")
    return out / "profile.yaml"

