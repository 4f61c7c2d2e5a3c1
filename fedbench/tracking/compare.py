"""Two experiments side by side (`fedbench compare`): before and after a change (one experiment in two stores), or
two variants of a task (`--set` values, told apart with `--a-where` / `--b-where`), on one board with each
configuration's difference and its 95% interval.

Each side is an experiment, `NAME` in the current store or `NAME@STORE` (a results folder or a tracking URI), and
optionally only its runs whose fields have given values. Configurations are paired by the fields that vary across
both sides, less those that tell the sides apart (the change itself, said above the board); seeds are pooled. The
interval is Welch's (`reproduction.verdict.half_width`): a difference whose interval holds 0 reads as a tie.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from fedbench.core.errors import ConfigError
from fedbench.tracking.leaderboard import DEFAULT_METRIC, IGNORED, label_runs, latest_finished, read_runs, readable
from fedbench.tracking.reproduction.verdict import half_width
from fedbench.tracking.store import field_columns

SIDE = "side"


@dataclass(frozen=True)
class Side:
    """One side of a comparison: an experiment in a store, its runs optionally narrowed to field values."""

    experiment: str
    uri: str
    where: tuple[tuple[str, str], ...] = ()
    written: str = ""
    """As the user wrote it (`quickstart@before/results`)."""

    @classmethod
    def parse(cls, text: str, default_uri: str, where: Sequence[str] = ()) -> Side:
        """`NAME` or `NAME@STORE` (a results folder holding mlflow.db, or a tracking URI), and `FIELD=VALUE`s."""
        name, _, store = text.partition("@")
        if not name:
            raise ConfigError("experiment", text, "NAME or NAME@STORE (a results folder or a tracking URI)")
        uri = default_uri
        if store:
            uri = store if "://" in store else f"sqlite:///{(Path(store).expanduser().resolve() / 'mlflow.db')}"
        pairs = []
        for item in where:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ConfigError("--a-where/--b-where", item, "FIELD=VALUE, e.g. optimizer.lr=0.05")
            pairs.append((key, value))
        return cls(name, uri, tuple(pairs), text + "".join(f" [{k}={v}]" for k, v in pairs))


@dataclass
class Comparison:
    """The board: a row per configuration both sides ran (and those only one did), with the change above it."""

    a: Side
    b: Side
    metric: str
    mode: str
    table: pd.DataFrame
    change: list[str] = field(default_factory=list)
    """`field: A's value -> B's value` for each field that tells the sides apart."""

    def markdown(self) -> str:
        """The board as a markdown page: both sides, the change, the table (numbers to 4 places)."""
        head = [
            f"# {self.metric}: B against A ({self.mode} is better)",
            "",
            f"- A: `{self.a.written}` in `{self.a.uri}`",
            f"- B: `{self.b.written}` in `{self.b.uri}`",
            f"- B differs from A in: {'; '.join(self.change) or 'no field (the same configurations)'}",
            "",
        ]
        columns = list(self.table.columns)
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        for row in self.table.to_dict("records"):
            lines.append("| " + " | ".join(cell(row[c]) for c in columns) + " |")
        return "\n".join(head + lines) + "\n"


def cell(value: object) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4f}"
    return str(value)


def side_runs(side: Side) -> pd.DataFrame:
    """The side's finished runs (each run hash once), narrowed to its `where` values."""
    runs = latest_finished(read_runs(side.experiment, side.uri))
    for key, value in side.where:
        if key not in runs:
            raise ConfigError("--a-where/--b-where", f"{key}={value}", f"a field the runs of {side.written} record")
        runs = runs[runs[key].astype(str) == value]
    if not len(runs):
        raise ConfigError("experiment", side.written, "an experiment with finished runs (those narrowed to)")
    return runs


def compare(a: Side, b: Side, metric: str = DEFAULT_METRIC, mode: str = "max") -> Comparison:
    """Side B against side A on `metric`: each configuration's mean ± std (n) on both sides, B − A, its interval and
    whether B is better, worse or tied (`mode`: which way is better)."""
    runs = pd.concat([side_runs(a).assign(**{SIDE: "A"}), side_runs(b).assign(**{SIDE: "B"})], ignore_index=True)
    if metric not in runs:
        raise ConfigError("--metric", metric, "a metric the runs record, e.g. final.acc_local_mean")
    fields = [f for f in field_columns(runs) if f not in IGNORED and not f.startswith("resources.")]
    varying = [f for f in fields if runs[f].astype(str).nunique() > 1]
    change = [f for f in varying if splits_sides(runs, f)]
    labels = label_runs(runs, [f for f in varying if f not in change])
    rows = []
    for configuration, group in runs.groupby(labels, sort=True):
        values = {s: group.loc[group[SIDE] == s, metric].astype(float).dropna().to_numpy() for s in ("A", "B")}
        rows.append({"configuration": configuration, **row_of(values["A"], values["B"], mode)})
    table = pd.DataFrame(rows)
    table["configuration"] = readable(list(table["configuration"]))
    said = [f"{f}: {value_of(runs, f, 'A')} -> {value_of(runs, f, 'B')}" for f in change]
    return Comparison(a, b, metric, mode, table, said)


def splits_sides(runs: pd.DataFrame, name: str) -> bool:
    """Whether field `name` has one value on each side, and not the same one: the change between them."""
    per_side = runs.groupby(SIDE)[name].agg(lambda v: set(v.astype(str)))
    return all(len(v) == 1 for v in per_side) and len(set.union(*per_side)) == 2


def value_of(runs: pd.DataFrame, name: str, side: str) -> str:
    return str(runs.loc[runs[SIDE] == side, name].astype(str).iloc[0])


def row_of(a: Sequence[float], b: Sequence[float], mode: str) -> dict[str, object]:
    """One configuration's cells: both sides' mean, std, n; B − A with its 95% interval; the verdict."""
    cells: dict[str, object] = {}
    for side, values in (("A", a), ("B", b)):
        cells[f"{side} mean"] = float(pd.Series(values).mean()) if len(values) else math.nan
        cells[f"{side} std"] = float(pd.Series(values).std(ddof=1)) if len(values) > 1 else math.nan
        cells[f"{side} n"] = len(values)
    if not len(a) or not len(b):
        return {**cells, "B - A": math.nan, "95% interval": "", "verdict": f"only in {'B' if len(b) else 'A'}"}
    diff = float(cells["B mean"]) - float(cells["A mean"])  # type: ignore[arg-type]
    if min(len(a), len(b)) < 2:
        return {**cells, "B - A": diff, "95% interval": "", "verdict": "? n=1 (no spread to test)"}
    parts = [(pd.Series(v).var(ddof=1) / len(v), len(v) - 1) for v in (a, b)]
    half = half_width(parts)
    low, high = diff - half, diff + half
    better = diff > 0 if mode == "max" else diff < 0
    verdict = "≈ tied" if low <= 0 <= high else ("B better" if better else "B worse")
    return {**cells, "B - A": diff, "95% interval": f"[{low:+.4f}, {high:+.4f}]", "verdict": verdict}
