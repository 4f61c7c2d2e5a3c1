"""What a drift costs a method and how fast it recovers, from the run's per-client rows (`per_client`), whose
distribution ids come from the scenario on the driver.

A drift event is a client whose distribution at an evaluated round differs from the one it held at its previous
evaluated round. For each event, on the client's local test split (which drifts with its training data):

- `drift_acc_drop`: its accuracy at the previous evaluated round less its accuracy at the round it drifts (positive:
  it fell), the accuracy lost to the drift after one round of training on the new data;
- rounds to recover: how many evaluated rounds after the drift until its accuracy is back within RECOVERY_MARGIN of
  the accuracy before it (0: no fall beyond the margin); an event whose client drifts again, or whose run ends,
  first is "not recovered" (censored, as recovery analysis for data streams counts it: Shaker and Huellermeier,
  Neurocomputing 2015).

Per round (only at rounds with an event): the mean drop over the clients that drifted, and the mean accuracy of
those clients against the clients that did not drift that round. Per run (only with an event): the mean drop, the
mean rounds to recover over recovered events, the share of events not recovered, and the two accuracies over all
event rounds. A run without drift records none of them (absent, not zero). `acc_over_time`, the mean over the
evaluated rounds of `acc_local_mean` (FedDrift's headline number, Jothimurugesan et al., AISTATS 2023), is
recorded for every run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from fedbench.core import metrics as M
from fedbench.core.drift import drift_events


def round_drift_metrics(table: Mapping[str, np.ndarray], round: int) -> dict[str, float]:
    """This round's drift metrics: the mean drop of the clients that drifted in it, their mean accuracy and the other
    evaluated clients'; empty where no client drifted this round."""
    events = [e for e in drift_events(table) if e.round == round]
    if not events:
        return {}
    drifted = {e.client for e in events}
    now = np.asarray(table["round"]) == round
    steady = [
        a
        for c, a in zip(np.asarray(table["client"])[now], np.asarray(table["acc_local"])[now], strict=True)
        if c not in drifted
    ]
    record = {
        M.DRIFT_ACC_DROP: float(np.mean([e.before - e.after for e in events])),
        M.ACC_DRIFTED: float(np.mean([e.after for e in events])),
    }
    if steady:
        record[M.ACC_STEADY] = float(np.mean(steady))
    return record


def run_drift_metrics(table: Mapping[str, np.ndarray], history: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The run's summary: `final.acc_over_time` always (where a round was evaluated), and with at least one drift
    event the mean drop, rounds to recover, share not recovered and the drifted and steady clients' accuracies."""
    summary: dict[str, float] = {}
    evaluated = [r[M.ACC_LOCAL_MEAN] for r in history if M.ACC_LOCAL_MEAN in r]
    if evaluated:
        summary[M.FINAL_PREFIX + M.ACC_OVER_TIME] = float(np.mean(evaluated))
    events = drift_events(table)
    if not events:
        return summary
    recovered = [e.recovery_rounds for e in events if e.recovery_rounds is not None]
    summary[M.FINAL_PREFIX + M.DRIFT_ACC_DROP] = float(np.mean([e.before - e.after for e in events]))
    summary[M.FINAL_PREFIX + M.RECOVERY_ROUNDS] = float(np.mean(recovered)) if recovered else math.nan
    summary[M.FINAL_PREFIX + M.UNRECOVERED] = 1.0 - len(recovered) / len(events)
    summary[M.FINAL_PREFIX + M.DRIFT_EVENTS] = float(len(events))
    rounds = [r[M.ACC_DRIFTED] for r in history if M.ACC_DRIFTED in r]
    steady = [r[M.ACC_STEADY] for r in history if M.ACC_STEADY in r]
    summary[M.FINAL_PREFIX + M.ACC_DRIFTED] = float(np.mean(rounds)) if rounds else math.nan
    if steady:
        summary[M.FINAL_PREFIX + M.ACC_STEADY] = float(np.mean(steady))
    return summary
