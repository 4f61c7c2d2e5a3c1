"""Leaderboards from the store: runs read back through the store interface, aggregated over seeds, ranked per group.

A configuration is everything that varies across the experiment's runs except the seed; the algorithm and
its parameters name it, the `group_by` fields (dataset, scenario, or any dotted RunSpec field) say which
configurations compete. Failed runs are returned apart with their reason, never dropped silently; a sweep's
attempt that Tune restarted (tagged retried) is not a failed run: its trial's next attempt is the result.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from rich.markup import escape
from rich.table import Table

from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError, FedbenchError
from fedbench.core.runspec import algorithm_defaults, quiet_defaults
from fedbench.tracking.intervals import BOOTSTRAP_FROM, POWER, holm, mean_interval, natural_bounds, seeds_needed
from fedbench.tracking.store import (
    FINISHED,
    RUN_HASH,
    RUN_LABEL,
    STATUS,
    RunStore,
    field_columns,
    is_metric,
    metric_columns,
    tag,
)
from fedbench.tracking.tags import FAILURE_REASON_TAG, REFERENCE_TAG, RETRIED_TAG, STOPPED_EARLY_TAG

DEFAULT_METRIC = M.FINAL_PREFIX + M.ACC_LOCAL_MEAN
COSTS = {
    "compute_s": (M.TOTAL_PREFIX + M.TIME_CLIENT_COMPUTE_S, 1.0),
    "wall_s": (M.TOTAL_PREFIX + M.TIME_RUN_S, 1.0),
    "startup_s": (M.TOTAL_PREFIX + M.TIME_STARTUP_S, 1.0),
    "mb_up": (M.TOTAL_PREFIX + M.COMM_UP_BYTES, 1e-6),
    "mb_down": (M.TOTAL_PREFIX + M.COMM_DOWN_BYTES, 1e-6),
}
"""Cost columns: name -> (metric, scale), each the mean over seeds (`run_costs` makes `wall_s` the run's time less
its `startup_s`). Names without spaces, so that exported tables read back as they are in pandas, R or SQL."""

ALIASES = {"dataset": ("dataset.",), "scenario": ("scenario.",), "algorithm": ("algorithm.",), "model": ("model.",)}
"""A group-by name standing for every varying field under a section."""

IGNORED = {
    "seed",
    "run_hash",
    "run_name",
    "task",
    "log_models",
    "resources.backend",
    "resources.num_workers",
    "dataset.data_root",
}
"""Fields that never tell configurations apart."""

INTERVAL_COLUMNS = ("ci_low", "ci_high", "ci_kind")
"""A mean's 95% interval and how it was made (`fedbench.tracking.intervals`), in every table that shows a mean."""


def run_costs(runs: pd.DataFrame) -> pd.DataFrame:
    """Each run's costs, a column per name of COSTS. `wall_s` leaves out the start-up of the run's workers
    (`startup_s`): the first run on a new worker pool pays it (13.7 s against 2.1 s for the same configuration
    on warm workers), so with it in, wall time would rank runs by who came first. A store from before
    `time_startup_s` has no start-up to take out: its `wall_s` stays as recorded."""

    def column(key: str, scale: float) -> pd.Series:
        return runs.get(key, pd.Series(np.nan, index=runs.index)).astype(float) * scale

    costs = pd.DataFrame({name: column(key, scale) for name, (key, scale) in COSTS.items()}, index=runs.index)
    costs["wall_s"] -= costs["startup_s"].fillna(0.0)
    return costs


@dataclass
class Leaderboard:
    """Ranked configurations and the failed runs, as DataFrames."""

    table: pd.DataFrame
    failed: pd.DataFrame
    metric: str


def read_runs(experiment: str, uri: str) -> pd.DataFrame:
    """The experiment's fedbench runs (sweep parent runs left out) in the store at `uri`, in the store interface's
    column names (`fedbench.tracking.store`)."""
    from fedbench.tracking.mlflow_store import MlflowStore

    return fedbench_runs(MlflowStore(uri), experiment)


def fedbench_runs(store: RunStore, experiment: str) -> pd.DataFrame:
    """The runs of `experiment` in `store` that ran a RunSpec (sweep parent runs left out).

    Raises:
        ConfigError: no such store or experiment.
    """
    runs = store.runs(experiment)
    if RUN_HASH not in runs:
        return runs.iloc[0:0]
    return runs[runs[RUN_HASH].notna()].reset_index(drop=True)


def finished_run_hashes(experiment: str, uri: str) -> set[str]:
    """The run hashes the experiment already holds a complete run of, as the leaderboard counts them (none when
    the store or the experiment is new): what `fedbench run` need not run again."""
    return set(finished_scores(experiment, uri))


def finished_scores(experiment: str, uri: str, metric: str | None = None) -> dict[str, float]:
    """Each run hash the experiment holds a complete run of (as the leaderboard counts them) -> that run's `metric`
    (NaN where it does not report it, or without a metric): what a search answers a configuration it ran with."""
    try:
        runs = read_runs(experiment, uri)
    except ConfigError:  # no such store or experiment yet
        return {}
    finished = latest_finished(runs) if len(runs) else runs
    column = M.canonical(metric or "")
    values = finished[column] if is_metric(column) and column in finished else pd.Series(np.nan, index=finished.index)
    return dict(zip(finished.get(RUN_HASH, []), values.astype(float), strict=True))


def latest_finished(runs: pd.DataFrame) -> pd.DataFrame:
    """The finished runs, each run hash once (its latest run): a RunSpec run twice is one seed, not two.

    A trial a scheduler stopped early (ASHA) ended FINISHED after fewer rounds than its RunSpec asks for: it
    is left out, so it neither ranks beside complete runs nor replaces a complete run of the same hash.
    """
    finished = runs[runs[STATUS] == FINISHED]
    if tag(STOPPED_EARLY_TAG) in finished:
        finished = finished[finished[tag(STOPPED_EARLY_TAG)].isna()]
    if RUN_HASH not in finished:
        return finished
    if "start_time" in finished:
        finished = finished.sort_values("start_time")
    return finished.drop_duplicates(RUN_HASH, keep="last").sort_index()


def build_leaderboard(
    runs: pd.DataFrame,
    metric: str = DEFAULT_METRIC,
    group_by: Sequence[str] = ("dataset", "scenario"),
    mode: str = "max",
) -> Leaderboard:
    """Mean, sample std, the mean's 95% interval and n over seeds per configuration, ranked within each group
    (1 = best), each marked against its group's best (`versus_best`).

    A configuration none of whose runs report the metric (`local` has no system accuracy) keeps its row,
    with the value missing and no rank.
    """
    metric = M.canonical(metric)
    finished = latest_finished(runs)
    column = metric
    if not is_metric(column) or column not in runs or finished[column].isna().all():
        known = sorted(c for c in metric_columns(runs) if runs[c].notna().any())
        raise ConfigError("--metric", metric, "a metric the runs report: " + ", ".join(known))
    group, configuration = group_and_configuration(finished, group_by)
    frame = pd.DataFrame({"group": group, "configuration": configuration, "value": finished[column].astype(float)})
    frame = frame.join(run_costs(finished))
    stats = frame.groupby(["group", "configuration"], sort=False)
    table = seed_stats(stats, metric)
    for name in COSTS:
        table[name] = stats[name].mean().to_numpy()
    table["rank"] = table.groupby("group")["mean"].rank(ascending=(mode == "min"), method="min").astype("Int64")
    marks = versus_best(frame, mode)
    keys = list(zip(table["group"], table["configuration"], strict=True))
    table["vs_best"] = [marks[key].mark if key in marks else "" for key in keys]
    table["seeds_needed"] = pd.array([marks[key].seeds_needed if key in marks else None for key in keys], "Int64")
    table = table.sort_values(["group", "rank"]).reset_index(drop=True)
    return Leaderboard(
        table[
            ["group", "rank", "configuration", "mean", "std", *INTERVAL_COLUMNS, "n", "vs_best", "seeds_needed", *COSTS]
        ],
        failed_runs(runs)[["run", "reason"]],
        metric,
    )


TIE_ALPHA = 0.05
"""Below this Holm-corrected p-value a configuration's seeds differ from the best's (Welch's t-test, two-sided)."""

TIE_NOTE = (
    "vs_best: each configuration's seeds against its group's best by Welch's t-test (two-sided), p corrected by "
    f"Holm over the group's comparisons: '≈' not distinguishable from it (p >= {TIE_ALPHA}), 'worse' "
    "distinguishable, '?' fewer than 2 seeds on either side; seeds_needed (under a '≈' in the console): the seeds "
    "per configuration (at least one more than ran) "
    f"that would tell a difference of the size observed apart at {POWER:.0%} power (t-test at {TIE_ALPHA}/m, m the "
    "group's comparisons, with the two configurations' pooled std)"
)
"""What the vs_best marks and seeds_needed mean, said wherever they are shown."""


@dataclass(frozen=True)
class VersusBest:
    """How a configuration's seeds compare with its group's best: the mark (`best`, `≈ p=0.43`, `worse p=0.01`,
    `? n=1`; p Holm-corrected) and, for a tie, the seeds each would need to tell the difference apart."""

    mark: str
    seeds_needed: int | None = None


def versus_best(frame: pd.DataFrame, mode: str) -> dict[tuple[str, str], VersusBest]:
    """(group, configuration) -> how its seeds' `value`s compare with the best configuration's of its group. A
    ranking that put 0.880 ± 0.08 above 0.872 would otherwise read as a result, and among ten configurations one
    in two would read as different from the best at p < 0.05 by chance alone without Holm's correction."""
    from scipy.stats import ttest_ind

    marks = {}
    for group, rows in frame.dropna(subset=["value"]).groupby("group", sort=False):
        seeds = {c: v["value"].to_numpy() for c, v in rows.groupby("configuration", sort=False)}
        means = {c: v.mean() for c, v in seeds.items()}
        best = (max if mode == "max" else min)(means, key=means.get)
        marks[(group, best)] = VersusBest("best")
        tested: dict[str, float] = {}
        for configuration, values in seeds.items():
            if configuration == best:
                continue
            if min(len(values), len(seeds[best])) < 2:
                marks[(group, configuration)] = VersusBest(f"? n={len(values)}")
            elif values.std() == 0 and seeds[best].std() == 0:  # no spread: equal or not, nothing to test
                tested[configuration] = 1.0 if means[configuration] == means[best] else 0.0
            else:
                tested[configuration] = float(ttest_ind(values, seeds[best], equal_var=False).pvalue)
        for (configuration, _), p in zip(tested.items(), holm(list(tested.values())), strict=True):
            tie = p >= TIE_ALPHA
            needed = None
            if tie:
                spread = float(np.sqrt((seeds[configuration].var(ddof=1) + seeds[best].var(ddof=1)) / 2))
                difference = means[configuration] - means[best]
                needed = seeds_needed(difference, spread, alpha=TIE_ALPHA / len(tested))
                # these seeds did not tell them apart, whatever the power computed: more are needed
                ran = min(len(seeds[configuration]), len(seeds[best]))
                needed = None if needed is None else max(needed, ran + 1)
            marks[(group, configuration)] = VersusBest(f"{'≈' if tie else 'worse'} p={p:.3g}", needed)
    return marks


STD_NOTE = "std: sample standard deviation over seeds (ddof 1; 0 for one seed); n: seeds"
"""fedbench's one std convention, said wherever a std is shown."""

INTERVAL_NOTE = (
    f"95% interval of the mean over seeds: Student's t below {BOOTSTRAP_FROM} seeds (a bootstrap of 3-5 values "
    f"covers too little), BCa bootstrap from {BOOTSTRAP_FROM}; none for one seed"
)
"""How a mean's interval is made, said wherever one is shown."""


def seed_stats(groups, metric: str) -> pd.DataFrame:
    """Mean, sample std (ddof 1; 0 for a single seed), n and the mean's 95% interval (`ci_low`, `ci_high`,
    `ci_kind`: `fedbench.tracking.intervals.mean_interval`, within `metric`'s natural bounds) of the `value` column
    of each group of seeds."""
    table = groups["value"].agg(mean="mean", std="std", n="count").reset_index()
    table.loc[table["n"] == 1, "std"] = 0.0
    bounds = natural_bounds(metric)
    intervals = [mean_interval(list(values), bounds=bounds) for _, values in groups["value"]]
    table["ci_low"] = [i.low for i in intervals]
    table["ci_high"] = [i.high for i in intervals]
    table["ci_kind"] = [i.kind for i in intervals]
    return table


def failed_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that did not finish, retried attempts and attempts a later run of the same RunSpec finished aside
    (a run stopped by Ctrl-C and resumed): run name, status and the reason they recorded."""
    failed = runs[runs[STATUS] != FINISHED]
    if tag(RETRIED_TAG) in failed:
        failed = failed[failed[tag(RETRIED_TAG)].isna()]
    if RUN_HASH in runs:
        finished = set(runs.loc[runs[STATUS] == FINISHED, RUN_HASH])
        failed = failed[~failed[RUN_HASH].isin(finished)]
    recorded = failed.get(tag(FAILURE_REASON_TAG), pd.Series(index=failed.index, dtype=object))
    return pd.DataFrame(
        {
            "run": failed.get(RUN_LABEL, pd.Series(dtype=str)),
            "status": failed[STATUS],
            "reason": recorded.where(recorded.notna(), failed[STATUS].map(UNRECORDED_REASONS)),
        }
    ).reset_index(drop=True)


UNRECORDED_REASONS = {
    "RUNNING": "not finished: still running, or its process ended without recording why",
    "KILLED": "killed before it finished",
    "FAILED": "failed without a recorded reason",
}
"""What a run that did not finish says where it recorded no reason (a run in progress has none yet)."""


def write_leaderboard(board: Leaderboard, path: Path, fmt: str) -> Path:
    """Save as markdown, csv or parquet (pyarrow)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        board.table.to_parquet(path, index=False)
    elif fmt == "csv":
        board.table.to_csv(path, index=False)
    else:
        path.write_text(to_markdown(board))
    return path


def to_markdown(board: Leaderboard) -> str:
    header = ["group", "rank", "configuration", f"{board.metric} (mean ± std)", "95% interval", "n", "vs_best"]
    header += ["seeds_needed", *COSTS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row, shown in zip(board.table.to_dict("records"), readable(board.table["configuration"]), strict=True):
        costs = [number(row[c], 2) for c in COSTS]
        value = f"{number(row['mean'], 4)} ± {number(row['std'], 4)}" if pd.notna(row["mean"]) else MISSING
        cells = [row["group"], number(row["rank"]), shown, value, interval_text(row), row["n"]]
        cells += [row["vs_best"] or MISSING, number(row["seeds_needed"]), *costs]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines += ["", STD_NOTE + ".", INTERVAL_NOTE + ".", TIE_NOTE + "."]
    if len(board.failed):
        lines += ["", "Runs that did not finish:", ""]
        lines += [f"- {r.run}: {r.reason}" for r in board.failed.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def interval_text(row: dict, digits: int = 4) -> str:
    """A row's 95% interval as `[low, high]`, MISSING without one (a single seed)."""
    if pd.isna(row["ci_low"]):
        return MISSING
    return f"[{row['ci_low']:.{digits}f}, {row['ci_high']:.{digits}f}]"


def to_table(board: Leaderboard, title: str) -> Table:
    """The board for the console: mean ± std and the interval to 4 places, costs to 2, every cell escaped for rich;
    the interval's kind is said in the caption rather than on every row."""
    table = Table(title=title, caption=f"{STD_NOTE}\n{INTERVAL_NOTE}\n{TIE_NOTE}")
    shown_apart = (*INTERVAL_COLUMNS, "std", "seeds_needed")  # in the mean's and the mark's cells
    columns = [c for c in board.table.columns if c not in shown_apart]
    if set(board.table["group"]) == {"all"}:  # nothing is grouped: the column would only say so on every row
        columns.remove("group")
    columns[columns.index("mean")] = MEAN_HEADER
    for column in columns:
        named = column in ("group", "configuration")  # wrapped, never cut: the end may tell two rows apart
        table.add_column(
            column,
            justify="left" if named else "right",
            overflow="fold" if named else "ellipsis",
            no_wrap=not named and column != MEAN_HEADER,
        )
    for row, shown in zip(board.table.to_dict("records"), readable(board.table["configuration"]), strict=True):
        cells = {
            **row,
            "configuration": shown,
            "rank": number(row["rank"]),
            MEAN_HEADER: mean_cell(row),
            "vs_best": row["vs_best"] + (f"\n{row['seeds_needed']} seeds" if pd.notna(row["seeds_needed"]) else ""),
            **{c: number(row[c], 2) for c in COSTS},
        }
        table.add_row(*(escape(str(cells[c])) for c in columns))
    return table


MEAN_HEADER = "mean ± std [95% interval]"
"""The console's one column for a mean: its std and its interval below it, so that the names keep their width."""


def mean_cell(row: dict) -> str:
    if pd.isna(row["mean"]):
        return MISSING
    shown = f"{number(row['mean'], 4)} ± {number(row['std'], 4)}"
    return shown if pd.isna(row["ci_low"]) else f"{shown}\n{interval_text(row)}"


MISSING = "–"
"""How a missing value reads in tables: a metric a configuration does not report, a cost it has no record of."""


def number(value, digits: int | None = None) -> str:
    """`value` to `digits` places (an integer as it is), or MISSING when it is NaN or NA."""
    if pd.isna(value):
        return MISSING
    return str(value) if digits is None else f"{value:.{digits}f}"


def group_and_configuration(runs: pd.DataFrame, group_by: Sequence[str]) -> tuple[pd.Series, pd.Series]:
    """Each run's group label and configuration label (the varying fields outside the groups; seeds pooled).

    Raises:
        ConfigError: a group-by name that is neither an alias nor a field the runs record.
    """
    varying = varying_params(runs)
    recorded = field_columns(runs)
    groups = expand_group_by(group_by, varying, recorded)
    config = [f for f in varying if f not in groups]
    configuration = label_runs(runs, config)
    column = tag(REFERENCE_TAG)
    if column in runs:  # a search's reference (FedAvg beside FEROMA's tau) reads as one
        configuration = configuration.where(runs[column] != "true", configuration + " (reference)")
    return label_runs(runs, groups), configuration


def varying_params(runs: pd.DataFrame) -> list[str]:
    """RunSpec fields (params) whose value differs across `runs`, less those that never tell configurations apart."""
    return sorted(
        f
        for f in field_columns(runs)
        if f not in IGNORED and not f.startswith("resources.") and runs[f].nunique(dropna=False) > 1
    )


def expand_group_by(group_by: Sequence[str], varying: list[str], recorded: list[str]) -> list[str]:
    """The varying fields a group-by list names: an alias (`scenario`) stands for every field of its section,
    a field name (or the start of one) for itself. A name no `recorded` field answers to is refused: it
    would group every run as "all" without a word."""
    out: list[str] = []
    for name in group_by:
        prefixes = ALIASES.get(name, (name,))
        if name not in ALIASES and not any(f.startswith(prefixes) for f in recorded):
            raise ConfigError("--group-by", name, f"{', '.join(ALIASES)} or a RunSpec field such as scenario.alpha")
        out += [f for f in varying if f.startswith(prefixes) or f == name]
    return list(dict.fromkeys(out))


def label_runs(runs: pd.DataFrame, fields: list[str]) -> pd.Series:
    """A readable label per run over the varying `fields` that apply to it, or 'all' when there are none.

    The algorithm reads as its name followed by the parameters that tell its runs apart: those set away from
    the method's default or varying among its own runs (`fedprox mu=0.1`, `feroma warmup_rounds=2,
    scenario.alpha=0.1`). A parameter another algorithm has (missing for this run) is left out, and so is a
    protocol field at its default (`quiet_defaults`: `fedavg, scored_round=lowest_validation_loss` beside `ifca`)
    unless nothing else would be left.
    """
    if not fields:
        return pd.Series("all", index=runs.index)
    own = [f for f in fields if f.startswith("algorithm.") and f != "algorithm.name"]
    telling = (
        {name: _telling_params(group, own) for name, group in runs.groupby(ALGORITHM_PARAM, dropna=False)}
        if ALGORITHM_PARAM in runs
        else {}
    )
    quiet = quiet_defaults()

    def run_label(row: pd.Series) -> str:
        shown = {f: row[f] for f in fields if f not in own or f in telling.get(row.get(ALGORITHM_PARAM), own)}
        said = {f: v for f, v in shown.items() if not (f in quiet and str(v) == quiet[f])}
        return label(said if any(not pd.isna(v) for v in said.values()) else shown)

    return runs.apply(run_label, axis=1)


ALGORITHM_PARAM = "algorithm.name"


def _telling_params(group: pd.DataFrame, fields: list[str]) -> set[str]:
    """The algorithm parameters among `fields` that say something about this algorithm's runs: recorded, and
    either varying among them or away from the method's default (every recorded one when it is unknown)."""
    recorded = [f for f in fields if group[f].notna().any()]
    try:
        defaults = algorithm_defaults(str(group[ALGORITHM_PARAM].iloc[0]))
    except FedbenchError:
        return set(recorded)
    return {
        f
        for f in recorded
        if group[f].nunique(dropna=False) > 1
        or any(str(v) != str(defaults.get(f.removeprefix("algorithm."))) for v in group[f])
    }


LONG_NUMBER = re.compile(r"-?\d+\.\d{4,}(?:e[+-]?\d+)?")
"""A number written with more digits than a reader compares (a sampled `tau=0.11236203565420874`)."""


def readable(labels: Sequence[str]) -> list[str]:
    """`labels` with long numbers cut to 3 significant digits (`tau=0.112`) for tables people read, unless that would
    make two different labels read the same (the full ones stay in CSV, parquet and MLflow)."""
    short = [LONG_NUMBER.sub(lambda m: f"{float(m.group()):.3g}", text) for text in labels]
    return short if len(set(short)) == len(set(labels)) else list(labels)


def label(values: dict[str, object]) -> str:
    """'algorithm k=v, field=value, ...' from a run's varying fields, those without a value left out."""
    present = {f: v for f, v in values.items() if not pd.isna(v)}
    algorithm = [str(present.pop("algorithm.name"))] if "algorithm.name" in present else []
    algorithm += [
        f"{f.removeprefix('algorithm.')}={present.pop(f)}" for f in list(present) if f.startswith("algorithm.")
    ]
    parts = [" ".join(algorithm)] if algorithm else []
    parts += [f"{f.removesuffix('.name')}={v}" for f, v in present.items()]
    return ", ".join(parts) or "all"
