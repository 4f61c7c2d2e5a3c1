"""A sweep's runs in MLflow: one parent run per sweep, one nested child run per trial.

The parent is what `--resume` finds again (by the sweep's name) and the children are what it trusts: a
trial whose child run ended is done, one left RUNNING by an interrupted sweep is deleted and run again. A
child marked retried (an attempt Tune restarted after its process died) says nothing about its trial.
The sweep (tuning/) asks for these steps by name and never talks to MLflow itself; what this module reads back (the
parent, its children) it reads through the store interface (`fedbench.tracking.mlflow_store`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode

from fedbench.core.errors import ConfigError
from fedbench.tracking.mlflow_callback import experiment_id_for
from fedbench.tracking.mlflow_store import MlflowStore
from fedbench.tracking.patient_store import PatientClient
from fedbench.tracking.store import StoredRun
from fedbench.tracking.store_template import prepare_store
from fedbench.tracking.sweep_lease import Heartbeat, Lease
from fedbench.tracking.tags import ATTEMPTS_TAG, LEASE_TAG, RETRIED_TAG, SWEEP_TAG, TRIAL_KEY_TAG, TRIALS_TAG

ENDED = ("FINISHED", "FAILED")
"""Statuses of a child run whose trial is done: it failed for a reason a rerun would not change."""


@dataclass(frozen=True)
class SweepParent:
    """A sweep's parent run, and which attempt (1, then one more per `--resume`) now runs under it."""

    run_id: str
    attempt: int


class SweepRuns:
    """The sweeps of experiment `experiment` (created if needed) in the tracking store at `uri`."""

    def __init__(self, uri: str, experiment: str):
        prepare_store(uri)
        self.client = PatientClient(uri)
        self.experiment = experiment
        self.experiment_id = experiment_id_for(self.client, experiment)
        self.store = MlflowStore(uri, self.client)

    def start_parent(self, sweep: str, trials: int) -> SweepParent:
        """A new parent run for sweep `sweep` of `trials` trials, as its first attempt, leased to this process.
        Refused while another live process runs the sweep: a second plain `sweep` trained its trials again under a
        parent of its own (issue 47, item 6)."""
        latest = self.store.sweep_parent(self.experiment, sweep)
        if latest is not None:
            self._refuse_if_held(latest, sweep, "task", "--resume it")
        run = self.client.create_run(
            self.experiment_id,
            run_name=f"sweep {sweep}",
            tags={SWEEP_TAG: sweep, TRIALS_TAG: str(trials), ATTEMPTS_TAG: "1", LEASE_TAG: Lease.mine().text()},
        )
        return SweepParent(run.info.run_id, 1)

    def reopen_parent(self, sweep: str) -> SweepParent | None:
        """The latest parent run of sweep `sweep`, RUNNING again as its next attempt and leased to this process;
        None when there is none. Refused while another live process holds the sweep (`sweep_lease`)."""
        run = self.store.sweep_parent(self.experiment, sweep)
        if run is None:
            return None
        self._refuse_if_held(run, sweep, "--resume", "--resume again")
        attempt = int(run.tags.get(ATTEMPTS_TAG, "0")) + 1
        self._claim(run.run_id, attempt, sweep)
        self.client.update_run(run.run_id, status="RUNNING")
        self.client.set_tag(run.run_id, ATTEMPTS_TAG, str(attempt))
        self.client.set_tag(run.run_id, LEASE_TAG, Lease.mine().text())
        return SweepParent(run.run_id, attempt)

    @staticmethod
    def _refuse_if_held(run: StoredRun, sweep: str, field: str, then: str) -> None:
        """Refuse (naming `field`) to run sweep `sweep` while a live process holds its parent `run`'s lease."""
        holder = Lease.parse(run.tags.get(LEASE_TAG))
        if run.status == "RUNNING" and holder is not None and holder.alive():
            raise ConfigError(
                field,
                sweep,
                f"a sweep no other process is running: {holder.describe()} runs it "
                f"now; wait for it to end, or stop it (Ctrl-C) and {then}",
            )

    def _claim(self, run_id: str, attempt: int, sweep: str) -> None:
        """Make this process attempt `attempt` of the sweep, or refuse when another process made itself that attempt
        first: an experiment's name stays unique in the store, deleted or not, so exactly one creation succeeds."""
        try:
            claim = self.client.create_experiment(f".fedbench-claim-{run_id}-{attempt}")
        except MlflowException as exc:
            if exc.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
                raise
            raise ConfigError(
                "--resume",
                sweep,
                "one --resume of a sweep at a time: another process resumed it at the same moment and runs it now",
            ) from None
        self.client.delete_experiment(claim)

    def heartbeat(self, parent_run_id: str) -> Heartbeat:
        """While open, this process says every few seconds that it still runs the sweep (`sweep_lease`)."""
        return Heartbeat(self.client, parent_run_id)

    def children(self, parent_run_id: str) -> list[StoredRun]:
        """Every child run of the parent, one per trial that started."""
        return self.store.sweep_children(self.experiment, parent_run_id)

    def finished_trials(self, parent_run_id: str) -> set[str]:
        """The trial keys of the children that ended (retried attempts aside): a resumed sweep does not run those
        trials again."""
        return {
            run.tags.get(TRIAL_KEY_TAG)
            for run in self.children(parent_run_id)
            if run.status in ENDED and RETRIED_TAG not in run.tags
        }

    def drop_unfinished_children(self, parent_run_id: str) -> int:
        """Delete the children an interrupted sweep left unended (their trials run again); how many there were."""
        unfinished = [run for run in self.children(parent_run_id) if run.status not in ENDED]
        for run in unfinished:
            self.client.delete_run(run.run_id)
        return len(unfinished)

    def end_parent(self, parent_run_id: str, interrupted: bool) -> None:
        """Mark the parent KILLED when trials are left to run (a `--resume` continues it), else FINISHED, and give
        its lease up."""
        self.client.set_terminated(parent_run_id, "KILLED" if interrupted else "FINISHED")
        self.client.delete_tag(parent_run_id, LEASE_TAG)

    def latest_parent(self, sweep: str) -> StoredRun | None:
        """The latest parent run of sweep `sweep`, left as it is; None when there is none."""
        return self.store.sweep_parent(self.experiment, sweep)

    def log_files(self, run_id: str, files: Sequence[Path], folder: str) -> list[str]:
        """Attach `files` to run `run_id` as artifacts in `folder`; returns their artifact paths."""
        return self.store.attach(run_id, files, folder)
