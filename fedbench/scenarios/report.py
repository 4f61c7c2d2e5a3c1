"""What a scenario looks like, as numbers (per-client class histograms, table rows, label-skew summaries)
and as the tables and summary `fedbench scenario show` prints (`describe_scenario`).

Histograms count labels as the client sees them, i.e. after its `label_map` (concept shift), so a
relabelled client shows up as a different class mix. `fedbench.scenarios.plot` draws the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table

from fedbench.scenarios.artifact import ClientView, Scenario


def view_histogram(labels: np.ndarray, view: ClientView, num_classes: int, split: str = "train") -> np.ndarray:
    """Counts per class of one view's `train` or `test` samples, labels mapped through its `label_map`."""
    indices = view.train if split == "train" else view.test
    seen = np.asarray(labels)[indices]
    if view.label_map is not None:
        seen = np.asarray(view.label_map)[seen]
    counts = np.bincount(seen.astype(np.int64, copy=False), minlength=num_classes)
    if len(counts) > num_classes:
        raise ValueError(f"labels up to {len(counts) - 1} seen, but num_classes is {num_classes}")
    return counts


def class_histograms(labels: np.ndarray, scenario: Scenario, round: int, num_classes: int) -> np.ndarray:
    """[clients, classes] counts of each client's training samples in `round` (1-based), after its label map."""
    return np.stack([view_histogram(labels, scenario.view(round, c), num_classes) for c in range(scenario.num_clients)])


def test_client_histograms(labels: np.ndarray, scenario: Scenario, num_classes: int) -> np.ndarray:
    """[test clients, classes] counts of each test-time client's samples (`view.test`), after its label map."""
    rows = [view_histogram(labels, tc.view, num_classes, split="test") for tc in scenario.test_clients]
    return np.stack(rows) if rows else np.zeros((0, num_classes), dtype=np.int64)


test_client_histograms.__test__ = False  # a library function, not a pytest test, whatever its name


@dataclass(frozen=True)
class ClientRow:
    """One client in one round, for printing."""

    client: int
    train: int
    test: int
    distribution_id: int
    description: str
    classes: tuple[int, ...]
    """Classes (as the client sees them) with at least one training sample."""
    counts: np.ndarray
    """Training samples per class, after the label map."""


def round_summary(labels: np.ndarray, scenario: Scenario, round: int, num_classes: int) -> list[ClientRow]:
    """One row per client of `round`: sizes, ground-truth distribution, classes present and their counts."""
    hist = class_histograms(labels, scenario, round, num_classes)
    rows = []
    for c in range(scenario.num_clients):
        view = scenario.view(round, c)
        rows.append(
            ClientRow(
                c,
                len(view.train),
                len(view.test),
                int(view.distribution_id),
                view.description,
                tuple(int(k) for k in np.flatnonzero(hist[c])),
                hist[c],
            )
        )
    return rows


def mean_pairwise_js(histograms: np.ndarray) -> float:
    """Mean Jensen-Shannon divergence (natural log: 0 for identical rows, ln 2 for disjoint ones) over all
    pairs of rows, each row normalised to a distribution first. Empty rows are left out; nan when fewer
    than two rows remain."""
    h = np.asarray(histograms, dtype=np.float64)
    totals = h.sum(axis=1)
    p = h[totals > 0] / totals[totals > 0, None]
    n = len(p)
    if n < 2:
        return float("nan")
    a, b = p[:, None, :], p[None, :, :]
    m = (a + b) / 2

    def kl(x: np.ndarray) -> np.ndarray:  # KL(x || m), 0 log 0 = 0; m > 0 wherever x > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(x > 0, x * np.log(np.where(x > 0, x, 1.0) / np.where(m > 0, m, 1.0)), 0.0)
        return terms.sum(axis=-1)

    js = 0.5 * kl(a) + 0.5 * kl(b)
    upper = np.triu_indices(n, k=1)
    return float(np.clip(js[upper], 0.0, None).mean())


def default_rounds(scenario: Scenario, rounds: int, max_stages: int = 4) -> list[int]:
    """Rounds worth looking at: 1, the first round of each drift stage (the first `max_stages` stages) and
    the last round, in order, each once."""
    picked = {1, rounds}
    seen_stages: set[int] = set()
    for r in range(1, rounds + 1):
        stage = scenario.stage_of(r)
        if stage not in seen_stages:
            seen_stages.add(stage)
            if len(seen_stages) <= max_stages:
                picked.add(r)
    return sorted(picked)


def histogram_text(counts: np.ndarray, top: int = 10) -> str:
    """Compact class histogram: 'class:count' for the classes present; beyond 12 classes present, the `top`
    largest and how many more."""
    present = np.flatnonzero(counts)
    if len(present) == 0:
        return "-"
    if len(present) <= 12:
        return " ".join(f"{k}:{counts[k]}" for k in present)
    largest = sorted(present, key=lambda k: (-counts[k], k))[:top]
    shown = " ".join(f"{k}:{counts[k]}" for k in largest)
    return f"{len(present)} cls, top {shown} +{len(present) - top} more"


def describe_scenario(
    labels: np.ndarray, scenario: Scenario, rounds: Sequence[int], total_rounds: int, num_classes: int
) -> list[RenderableType]:
    """What `fedbench scenario show` prints, in order: a table per round in `rounds` (a round of a stage
    already shown says so), the test clients, and a summary of the federation and its label skew."""
    return [
        *round_tables(labels, scenario, rounds, num_classes),
        table_of_test_clients(labels, scenario, num_classes),
        *summary_lines(labels, scenario, total_rounds, num_classes),
    ]


def round_tables(labels: np.ndarray, scenario: Scenario, rounds: Sequence[int], num_classes: int) -> list[Table]:
    tables = []
    first_of_stage: dict[int, int] = {}
    for r in rounds:
        s = scenario.stage_of(r)
        stage = f", stage {s}" if len(scenario.stages) > 1 else ""
        same = f" (same data as round {first_of_stage[s]})" if s in first_of_stage else ""
        first_of_stage.setdefault(s, r)
        table = Table(title=f"round {r}{stage}{same}", title_justify="left")
        for column in ("client", "train", "test", "dist", "description", "classes (label:count)"):
            table.add_column(column, justify="right" if column in ("client", "train", "test", "dist") else "left")
        for row in round_summary(labels, scenario, r, num_classes):
            table.add_row(
                str(row.client),
                str(row.train),
                str(row.test),
                f"d{row.distribution_id}",
                escape(row.description),
                histogram_text(row.counts),
            )
        tables.append(table)
    return tables


def table_of_test_clients(labels: np.ndarray, scenario: Scenario, num_classes: int) -> RenderableType:
    if not scenario.test_clients:
        return "no test clients"
    table = Table(title="test clients", title_justify="left")
    for column in ("client", "size", "labelled", "origin", "dist", "description", "classes (label:count)"):
        table.add_column(column, justify="left" if column in ("description", "classes (label:count)") else "right")
    histograms = test_client_histograms(labels, scenario, num_classes)
    for i, (tc, counts) in enumerate(zip(scenario.test_clients, histograms, strict=True)):
        dist = f"d{tc.view.distribution_id}" + ("" if tc.seen else " [red]unseen[/]")
        table.add_row(
            f"t{i}",
            str(len(tc.view.test)),
            str(len(tc.labelled)),
            f"c{tc.origin}" if tc.origin >= 0 else "-",
            dist,
            escape(tc.view.description),
            histogram_text(counts),
        )
    return table


def summary_lines(labels: np.ndarray, scenario: Scenario, total_rounds: int, num_classes: int) -> list[str]:
    """The federation in one line (clients, stages, distinct distributions, duplication, input shape) and
    round 1's label skew in another."""
    trained = {int(d) for d in scenario.distribution_ids(total_rounds).ravel()}
    tested = {tc.view.distribution_id for tc in scenario.test_clients}
    js = mean_pairwise_js(class_histograms(labels, scenario, 1, num_classes))
    federation = (
        f"{scenario.num_clients} clients, {len(scenario.stages)} stage{'s' if len(scenario.stages) > 1 else ''}, "
        f"{len(trained)} distinct distributions in training"
        + (f" ({len(trained | tested)} with the test clients), " if tested - trained else ", ")
        + f"{'duplicated' if scenario.duplicated else 'not duplicated'}, input shape {scenario.input_shape}"
    )
    skew = (
        f"label skew: mean pairwise Jensen-Shannon divergence of round 1's class histograms {js:.3f} "
        "(0: identical, ln 2 = 0.693: disjoint classes)"
    )
    return [federation, skew]
