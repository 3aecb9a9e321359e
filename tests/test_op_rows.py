"""Per-op tables as numpy rows (simulator/cost/op_rows.py): the plain reader gives read_table's values to
the bit on every shipped table and random floats, leaves every other file (and so every error) to
read_table, the numpy median and monotone fit are pandas' groupby formulations to the bit, and the
per-user cache hits, misses on a changed file, ignores a corrupt entry and can be turned off."""
from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.cost import op_rows
from simulator.cost.op_rows import _parse, cache_dir, load_rows
from simulator.cost.op_table import (
    _isotonic,
    file_sha256,
    median_by,
    monotone_rows,
    monotone_table,
    read_table,
    to_rows,
)
from simulator.errors import ScenarioError

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted(str(p.relative_to(REPO)) for p in (REPO / "hwprofiles").glob("*/ops.csv*"))
CPU_TABLE = REPO / "hwprofiles" / "cpu-amd-epyc-tiny-llama" / "ops.csv"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPLAN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LLMPLAN_TABLE_CACHE", raising=False)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal dtypes and every column equal, floats to the bit."""
    return a.dtype == b.dtype and all(a[c].tobytes() == b[c].tobytes() for c in a.dtype.names or ())


def pandas_monotone(df: pd.DataFrame) -> np.ndarray:
    """The monotone fit as pandas groups it (the formulation the numpy one replaced): the reference."""
    shape = ["op", "family", "dtype", "n", "k", "batch", "context", "num_heads", "num_kv_heads", "head_dim", "width",
             "world_size", "num_experts", "top_k", "weight_bits"]
    sizes = {"gemm": "tokens", "elementwise": "tokens", "sampling": "tokens", "attn_prefill": "tokens",
             "comm": "message_bytes", "moe": "tokens", "mla_prefill": "tokens", "all_to_all": "tokens"}
    out = df.copy()
    for fam, size in sizes.items():
        sel = out[out["family"] == fam].sort_values(size, kind="stable")
        if sel.empty:
            continue
        log_s = np.log(sel["median_s"].to_numpy(np.float64))
        fitted = np.empty_like(log_s)
        for rows in sel.groupby([c for c in shape if c != size], sort=False).indices.values():
            fitted[rows] = np.exp(_isotonic(log_s[rows]))
        out.loc[sel.index, "median_s"] = fitted
    return out["median_s"].to_numpy(np.float64)


# -- the plain reader --------------------------------------------------------------------------------------
@pytest.mark.parametrize("table", SHIPPED)
def test_plain_reader_gives_read_tables_rows_on_every_shipped_table(table: str) -> None:
    path = REPO / table
    want = to_rows(read_table(path))
    got = _parse(path.name, path.read_bytes())
    assert got is not None, "a shipped table went to the pandas reader"
    assert same(got, want)
    mono = load_rows(path, sha256=file_sha256(path), monotone=True)
    assert mono["median_s"].tobytes() == pandas_monotone(read_table(path)).tobytes()
    assert mono["median_s"].tobytes() == monotone_table(read_table(path))["median_s"].to_numpy().tobytes()
    assert same(load_rows(path), want)


def test_plain_reader_parses_floats_as_pandas_does(tmp_path: Path) -> None:
    """Times written as repr, 17 significant digits, 6 and in exponent form read as the very floats pandas reads."""
    rng = np.random.default_rng(7)
    t = np.exp(rng.uniform(np.log(1e-8), np.log(10.0), 4000))
    texts = [repr(float(v)) for v in t[:1000]] + [f"{v:.17g}" for v in t[1000:2000]] \
        + [f"{v:.6g}" for v in t[2000:3000]] + [f"{v:.12e}" for v in t[3000:]]
    base = pd.read_csv(CPU_TABLE).iloc[[0]]
    lines = [",".join(base.columns)]
    row = base.iloc[0].astype(str).to_dict()
    for text in texts:
        lines.append(",".join(text if c == "median_s" else ("" if row[c] == "nan" else row[c]) for c in base.columns))
    path = tmp_path / "ops.csv"
    path.write_text("\n".join(lines) + "\n")
    got = _parse(path.name, path.read_bytes())
    assert got is not None
    assert got["median_s"].tobytes() == read_table(path)["median_s"].to_numpy(np.float64).tobytes()


def unusual(text: str) -> dict[str, str]:
    """The CPU table written in ways the plain reader leaves to pandas (the same rows)."""
    head, *body = text.splitlines()
    return {"bom": "\ufeff" + text, "crlf": text.replace("\n", "\r\n"), "quoted": head + "\n" + "\n".join(
                f'"{line.split(",")[0]}",' + line.split(",", 1)[1] for line in body) + "\n",
            "blank line": head + "\n" + body[0] + "\n\n" + "\n".join(body[1:]) + "\n",
            "spaces": head + "\n" + "\n".join(line.replace(",", ", ", 1) for line in body) + "\n",
            "extra column": head + ",note\n" + "\n".join(line + ",x" for line in body) + "\n"}


@pytest.mark.parametrize("kind", ["bom", "crlf", "quoted", "blank line", "spaces", "extra column"])
def test_a_table_written_another_way_is_read_by_pandas_with_the_same_values(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "ops.csv"
    path.write_text(unusual(CPU_TABLE.read_text())[kind], newline="")
    assert _parse(path.name, path.read_bytes()) is None
    assert same(load_rows(path), to_rows(read_table(path)))
    if kind != "spaces":                           # pandas keeps the blank in " gemm"
        assert same(load_rows(path), load_rows(CPU_TABLE))


def corruptions(text: str) -> dict[str, str | bytes]:
    head, *body = text.splitlines()
    cols = head.split(",")

    def cell(row: int, column: str, value: str) -> str:
        lines = [line.split(",") for line in body]
        lines[row][cols.index(column)] = value
        return "\n".join([head, *(",".join(line) for line in lines)]) + "\n"
    return {"median 0": cell(3, "median_s", "0"), "median text": cell(2, "median_s", "fast"),
            "median empty": cell(1, "median_s", ""), "median inf": cell(0, "median_s", "inf"),
            "tokens 0": cell(0, "tokens", "0"), "width fraction": cell(5, "width", "1.5"),
            "width 1e300": cell(5, "width", "1e300"), "width negative": cell(5, "width", "-4"),
            "unknown op": cell(4, "op", "flash_attn"), "op nan": cell(4, "op", "nan"),
            "dtype empty": cell(4, "dtype", ""), "missing column": "\n".join(
                ",".join(line.split(",")[:-1]) for line in text.splitlines()) + "\n",
            "ragged": head + "\n" + body[0] + ",1\n" + "\n".join(body[1:]) + "\n",
            "header only": head + "\n", "empty": "", "not utf-8": text.encode("utf-8") + b"\xff\xfe\n",
            "width tab": cell(5, "width", "4096\t"), "median nbsp": cell(2, "median_s", "1e-05\u00a0"),
            "median underscore": cell(2, "median_s", "1_0")}


@pytest.mark.parametrize("kind", ["median 0", "median text", "median empty", "median inf", "tokens 0",
                                  "width fraction", "width 1e300", "width negative", "unknown op", "op nan",
                                  "dtype empty", "missing column", "ragged", "header only", "empty", "not utf-8",
                                  "width tab", "median nbsp", "median underscore"])
@pytest.mark.parametrize("gz", [False, True])
def test_a_bad_table_gets_read_tables_error(tmp_path: Path, kind: str, gz: bool) -> None:
    """Every file the plain reader does not accept goes to read_table: the same error, or the same rows."""
    data = corruptions(CPU_TABLE.read_text())[kind]
    raw = data if isinstance(data, bytes) else data.encode()
    path = tmp_path / ("ops.csv.gz" if gz else "ops.csv")
    path.write_bytes(gzip.compress(raw) if gz else raw)
    try:
        want: np.ndarray | ScenarioError = to_rows(read_table(path, sha256=file_sha256(path)))
    except ScenarioError as exc:
        want = exc
    if isinstance(want, ScenarioError):
        with pytest.raises(ScenarioError) as got:
            load_rows(path, sha256=file_sha256(path), monotone=True)
        assert (got.value.field, str(got.value.value), got.value.message) == (want.field, str(want.value), want.message)
    else:
        assert same(load_rows(path, sha256=file_sha256(path)), want)


def test_file_errors_are_read_tables(tmp_path: Path) -> None:
    for path, kw, words in ((tmp_path / "gone.csv", {}, "per-op table not found"),
                            (CPU_TABLE, {"sha256": "0" * 64}, "does not match the sha256"),
                            (CPU_TABLE, {"schema": 2}, "reads table schema 1 only"),
                            (tmp_path, {}, "a directory")):
        with pytest.raises(ScenarioError, match=words):
            load_rows(path, **kw)  # type: ignore[arg-type]
    fake = tmp_path / "ops.csv.gz"
    fake.write_bytes(CPU_TABLE.read_bytes())
    with pytest.raises(ScenarioError, match=r"named \.gz but not gzip-compressed"):
        load_rows(fake)
    assert not (tmp_path / "cache").exists()


def test_median_by_is_pandas_groupby_median() -> None:
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 40, 3000)
    values = np.exp(rng.normal(size=3000))
    k, m = median_by(keys, values)
    want = pd.Series(values).groupby(keys).median()
    assert k.tolist() == want.index.tolist() and m.tobytes() == want.to_numpy().tobytes()


def test_monotone_rows_is_the_pandas_formulation_on_noisy_curves() -> None:
    """Shuffled rows, ties in size, several curves per family: each curve fitted on its own in size order."""
    rng = np.random.default_rng(11)
    df = read_table(CPU_TABLE).sample(frac=1.0, random_state=5).reset_index(drop=True)
    df["median_s"] = df["median_s"] * np.exp(rng.normal(scale=0.3, size=len(df)))
    df = pd.concat([df, df.iloc[:40].assign(median_s=df["median_s"].iloc[:40] * 1.1)], ignore_index=True)
    assert monotone_rows(to_rows(df))["median_s"].tobytes() == pandas_monotone(df).tobytes()


# -- the cache ---------------------------------------------------------------------------------------------
def entries() -> list[Path]:
    where = cache_dir()
    assert where is not None
    return sorted(where.glob("*.npy")) if where.exists() else []


def test_cache_hit_reads_no_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = load_rows(CPU_TABLE, monotone=True)
    assert len(entries()) == 1
    raw = load_rows(CPU_TABLE)                     # the unfitted rows are their own entry
    assert len(entries()) == 2
    monkeypatch.setattr(op_rows, "_parse", lambda *a: pytest.fail("parsed on a hit"))
    monkeypatch.setattr(op_rows, "read_table", lambda *a, **k: pytest.fail("read on a hit"))
    assert same(load_rows(CPU_TABLE, monotone=True), first) and same(load_rows(CPU_TABLE), raw)
    assert len(entries()) == 2


def test_a_changed_file_misses(tmp_path: Path) -> None:
    path = tmp_path / "ops.csv"
    shutil.copy(CPU_TABLE, path)
    before = load_rows(path, monotone=True)
    df = pd.read_csv(path)
    df["median_s"] *= 2.0
    df.to_csv(path, index=False)
    after = load_rows(path, monotone=True)
    assert len(entries()) == 2
    assert same(after, to_rows(monotone_table(read_table(path))))
    assert not np.array_equal(after["median_s"], before["median_s"])


def test_the_cache_keeps_the_most_recently_used_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table rewritten again and again (a fit's scaled table per evaluation) does not fill the disk:
    past MAX_ENTRIES the least recently used entry goes, and a hit renews its entry."""
    monkeypatch.setattr(op_rows, "MAX_ENTRIES", 3)
    df = pd.read_csv(CPU_TABLE)
    keep = load_rows(CPU_TABLE)                                # used again below: never pruned
    (kept,) = entries()
    for i in range(5):
        path = tmp_path / f"ops-{i}.csv"
        df.assign(median_s=df["median_s"] * (1 + i / 10)).to_csv(path, index=False)
        os.utime(kept, (1e9, 1e9))                             # older than every new entry...
        assert same(load_rows(CPU_TABLE), keep)                # ...until this hit renews it
        load_rows(path)
    assert len(entries()) == 3 and kept in entries()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other array", "empty"])
def test_a_corrupt_entry_is_ignored_and_rebuilt(damage: str) -> None:
    want = load_rows(CPU_TABLE, monotone=True)
    (entry,) = entries()
    data = entry.read_bytes()
    if damage == "other array":
        np.save(entry, np.arange(5.0))
    else:
        entry.write_bytes({"garbage": b"not an array at all", "truncated": data[: len(data) // 2],
                           "empty": b""}[damage])
    assert same(load_rows(CPU_TABLE, monotone=True), want)
    assert same(np.load(entry), want)              # rewritten


def test_the_cache_can_be_turned_off_and_an_unwritable_one_is_skipped(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    want = to_rows(read_table(CPU_TABLE))
    monkeypatch.setenv("LLMPLAN_TABLE_CACHE", "0")
    assert cache_dir() is None
    assert same(load_rows(CPU_TABLE), want)
    assert not (tmp_path / "cache").exists()
    monkeypatch.delenv("LLMPLAN_TABLE_CACHE")
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("LLMPLAN_CACHE_DIR", str(blocker))      # a file where the folder would go
    assert same(load_rows(CPU_TABLE), want)


def test_cache_location_follows_xdg_and_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMPLAN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "llmplan" / "tables"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "llmplan" / "tables"

