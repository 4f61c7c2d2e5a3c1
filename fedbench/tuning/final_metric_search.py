"""Tune's OptunaSearch for metrics a trial reports only in its last report (test-time or system accuracy).

A trial reports every round and then its run's final numbers; `OptunaSearch.on_trial_result` indexes every
report by the metric and would fail on the rounds before it exists. Optuna scores a trial by its last report
either way, so reports without the metric are simply not forwarded as intermediate values.
"""

from __future__ import annotations

from ray.tune.search.optuna import OptunaSearch


class FinalMetricOptunaSearch(OptunaSearch):
    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if self.metric in result:
            super().on_trial_result(trial_id, result)
