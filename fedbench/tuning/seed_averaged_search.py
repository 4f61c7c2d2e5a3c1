"""Tune's searcher for `fedbench sweep --search`: Optuna's TPE over distinct configurations, each scored on every
seed of the task, with the space's references run beside it.

- A sampled configuration goes out as one trial per seed; Optuna is told the mean of their final metric once all
  have reported (a seed that fails fails the configuration), so one lucky seed does not steer the search.
- A configuration whose runs already finished in the store (an earlier search, a grid) is answered from there with
  no trial, and one sampled again while its trials run waits for their mean: nothing is trained twice. Either way
  it was one of the sampler's `--num-samples` proposals, and it counts as one.
- Each reference (an algorithm the space lists with nothing to tune) runs once per seed before the samples, and is
  never sampled: TPE would pick the one configuration it has again and again.
- The study lives in a journal (`study_plots.study_journal`): a resumed search counts its proposals from there, and
  finishes a proposal an interrupted attempt left open (from the store where its seeds finished).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ray.tune.search import Searcher

from fedbench.tuning.plan import SEED, SweepPlan
from fedbench.tuning.search_space import ALGORITHM
from fedbench.tuning.study_plots import REFERENCE_ATTR

if TYPE_CHECKING:
    import optuna

log = logging.getLogger(__name__)

Config = dict[str, Any]


@dataclass
class Proposal:
    """A configuration the sampler proposed (one or more Optuna trials asked for it) and its seeds' scores."""

    trials: list[int]
    scores: dict[int, float | None] = field(default_factory=dict)


class SeedAveragedSearch(Searcher):
    """See the module docstring. `recorded` maps the run hash of every run finished in the store to its metric; the
    runs this search ends are added (a failed one with None)."""

    def __init__(
        self,
        plan: SweepPlan,
        study: optuna.Study,
        recorded: dict[str, float | None],
        say: Callable[[str], None] = log.info,
    ):
        super().__init__(metric=plan.metric, mode=plan.mode)
        self.plan, self.study, self.recorded, self.say = plan, study, recorded, say
        assert plan.space is not None, "a search plan has a search space"
        self.space = plan.space
        self.spec_of = plan.spec_of
        self.queue: deque[Config] = deque()
        self.proposals: dict[str, Proposal] = {}
        self.running: dict[str, tuple[str, int, str]] = {}
        self.reused = 0
        """Proposals answered from the store."""
        self.sent = 0
        """Trials handed to Tune."""
        for name in plan.space.references:
            self._send({f"{ALGORITHM}.name": name}, None)
            self._note_reference(self._key({f"{ALGORITHM}.name": name}))
        self._reopen_interrupted()

    def __getstate__(self) -> dict[str, Any]:
        """What Tune pickles when it saves the experiment: all but the study (its storage holds a lock) and the
        printer. fedbench resumes a search from the study's journal and the store, never from Tune's copy."""
        return {k: v for k, v in self.__dict__.items() if k not in ("study", "say")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, study=None, say=log.info)

    @property
    def proposed(self) -> int:
        """The sampler's proposals so far, this attempt's and an interrupted attempt's."""
        return len(self.study.trials)

    @property
    def finished(self) -> bool:
        """Every proposal asked for and answered: the search is complete, not cut short."""
        return self.proposed >= self.plan.num_samples and not self.proposals and not self.queue and not self.running

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return True  # the plan fixed them

    def suggest(self, trial_id: str) -> Config | str | None:
        while not self.queue and self.proposed < self.plan.num_samples:
            trial = self.study.ask()
            self._propose(self.space.sample(trial), trial.number)
        if not self.queue:
            return Searcher.FINISHED if not self.proposals else None  # None: the last proposals' trials still run
        config = self.queue.popleft()
        self.running[trial_id] = (self._key(config), config[SEED], self.spec_of(config).run_hash)
        self.sent += 1
        return config

    def trials_planned(self) -> int:
        """This attempt's trials: those sent, those queued, and every seed of each proposal still to ask for (fewer
        as proposals are answered from the store)."""
        return self.sent + len(self.queue) + max(0, self.plan.num_samples - self.proposed) * len(self.plan.seeds)

    def save(self, checkpoint_path: str) -> None:
        """Nothing to save: a resumed search reads its study's journal and the store."""

    def restore(self, checkpoint_path: str) -> None:
        """Nothing to restore (see `save`)."""

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        key, seed, run_hash = self.running.pop(trial_id)
        score = None if error or not result else result.get(self.plan.metric)
        self.recorded[run_hash] = score  # proposed again later, it is answered with this (a failure fails again)
        self._note_reference(key)
        proposal = self.proposals.get(key)
        if proposal is not None:
            proposal.scores[seed] = score
            self._answer_if_scored(key)

    def _propose(self, params: Config, number: int) -> None:
        """A proposal: joined to the same configuration's open one, answered from the store, or sent out."""
        key = self._key(params)
        if key in self.proposals:
            self.proposals[key].trials.append(number)
            self.say(f"sample {number + 1}: {self._label(params)} again, while its trials run: it gets their mean")
            return
        self.proposals[key] = proposal = Proposal([number])
        proposal.scores.update(self._recorded_scores(params))
        if len(proposal.scores) == len(self.plan.seeds):
            self.reused += 1
            self.say(
                f"sample {number + 1}: {self._label(params)} already ran on every seed: answered with its "
                "recorded scores, no trial (it counts against --num-samples)"
            )
            self._answer_if_scored(key)
            return
        self._send(params, proposal)

    def _send(self, params: Config, proposal: Proposal | None) -> None:
        """A trial per seed not recorded yet (a reference's or a proposal's)."""
        done = proposal.scores if proposal is not None else self._recorded_scores(params)
        self.queue.extend({**params, SEED: seed} for seed in self.plan.seeds if seed not in done)

    def _note_reference(self, key: str) -> None:
        """Once a reference's seeds have all ended: its mean score in the study (`REFERENCE_ATTR`), for the plots."""
        for name in self.space.references:
            params = {f"{ALGORITHM}.name": name}
            scores = self._recorded_scores(params)
            if self._key(params) == key and len(scores) == len(self.plan.seeds) and None not in scores.values():
                mean = sum(s for s in scores.values() if s is not None) / len(scores)
                self.study.set_user_attr(REFERENCE_ATTR + name, mean)

    def _answer_if_scored(self, key: str) -> None:
        proposal = self.proposals[key]
        if len(proposal.scores) < len(self.plan.seeds):
            return
        import optuna

        del self.proposals[key]
        scores = list(proposal.scores.values())
        for number in proposal.trials:
            if all(s is not None and math.isfinite(s) for s in scores):
                self.study.tell(number, sum(s for s in scores if s is not None) / len(scores))
            else:
                self.study.tell(number, state=optuna.trial.TrialState.FAIL)

    def _reopen_interrupted(self) -> None:
        """Proposals an interrupted attempt asked for and never answered: finished from the store, or sent again."""
        import optuna

        for trial in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            self._propose(self.space.complete(trial.params), trial.number)

    def _recorded_scores(self, params: Config) -> dict[int, float | None]:
        """The seeds whose run of `params` ended (in the store, or in this search), with their scores."""
        found = {}
        for seed in self.plan.seeds:
            run_hash = self.spec_of({**params, SEED: seed}).run_hash
            if run_hash in self.recorded:
                found[seed] = self.recorded[run_hash]
        return found

    def _key(self, params: Config) -> str:
        """A configuration's identity: its run hash on the first seed."""
        return self.spec_of({**{k: v for k, v in params.items() if k != SEED}, SEED: self.plan.seeds[0]}).run_hash

    def _label(self, params: Config) -> str:
        """`feroma tau=0.0174 warmup_rounds=8`."""
        name = params.get(f"{ALGORITHM}.name")
        fields = [
            f"{k.removeprefix(ALGORITHM + '.')}={v:.3g}"
            if isinstance(v, float)
            else f"{k.removeprefix(ALGORITHM + '.')}={v}"
            for k, v in params.items()
            if k != f"{ALGORITHM}.name"
        ]
        return " ".join([name, *fields] if name else fields)
