"""What a scenario looks like, as numbers: per-client class histograms, table rows and label-skew summaries.

Used by `fedbench scenario show` (and `fedbench.scenarios.plot`); numpy only. Histograms count labels as
the client sees them, i.e. after its `label_map` (concept shift), so a relabelled client shows up as a
different class mix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
        rows.append(ClientRow(c, len(view.train), len(view.test), int(view.distribution_id), view.description,
                              tuple(int(k) for k in np.flatnonzero(hist[c])), hist[c]))
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

