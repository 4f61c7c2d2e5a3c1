"""A client worker whose process dies is replaced, and its job runs again from the client's last stored state."""

import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest

from fedbench.algorithms import make_algorithm
from fedbench.core.callbacks import Callback
from fedbench.data import load_dataset
from fedbench.runtime import Federation
from fedbench.runtime.failures import failure_reason
from fedbench.runtime.jobs import FIT
from fedbench.runtime.state_store import StateStore
from fedbench.scenarios import build_scenario
from tests.conftest import tiny_spec
from tests.runtime.test_ray_backend import deterministic

pytestmark = pytest.mark.ray


class KillWhenBusy(Callback):
    """After round `after`, SIGKILLs the process `pid` as soon as it uses CPU again: in the middle of its next job."""

    def __init__(self, pid: int, after: int):
        self.victim, self.after = psutil.Process(pid), after
        self.killer: threading.Thread | None = None

    def on_round_end(self, spec, record) -> None:
        if record["round"] == self.after:
            self.killer = threading.Thread(target=self._kill_when_busy, args=(sum(self.victim.cpu_times()[:2]),))
            self.killer.start()

    def _kill_when_busy(self, idle_cpu: float) -> None:
        deadline = time.monotonic() + 60
        while sum(self.victim.cpu_times()[:2]) <= idle_cpu and time.monotonic() < deadline:
            time.sleep(0.001)
        os.kill(self.victim.pid, signal.SIGKILL)


def test_a_worker_killed_mid_round_is_replaced_and_the_run_ends_as_if_undisturbed(ray_session, caplog):
    from fedbench.runtime.ray_pool import RayWorkerPool

    # ditto keeps a personal model in each client's state: a job re-run from a wrong state would change the numbers
    spec = tiny_spec(algorithm="ditto", rounds=3, seed=7, resources={"backend": "ray", "num_workers": 2})
    pool = RayWorkerPool(spec.resources, spec.scenario.num_clients)
    try:
        victim = ray_session.get(pool.workers[0].pid.remote())
        killer = KillWhenBusy(victim, after=1)
        with caplog.at_level("WARNING", logger="fedbench.runtime.ray_pool"):
            disturbed = Federation(spec, callbacks=[killer], pool=pool).run()
        killer.killer.join(timeout=60)
        pids = ray_session.get([w.pid.remote() for w in pool.workers])
    finally:
        pool.close()
    assert not psutil.pid_exists(victim) or psutil.Process(victim).status() == psutil.STATUS_ZOMBIE
    assert "a client worker died running client" in caplog.text and "of round 2" in caplog.text, caplog.text
    assert disturbed.status == "FINISHED", disturbed.reason
    assert len(set(pids)) == 2 and victim not in pids  # the pool is back to two live workers
    undisturbed = Federation(spec, backend="serial").run()  # same numbers as the ray backend (test_ray_backend)
    assert deterministic(disturbed.history) == deterministic(undisturbed.history)


class KillsItsReader:
    """Unpickled, it ends the process that reads it: a job that kills every worker it runs on (like one that runs
    out of memory), for real, without touching the driver (which only pickles it)."""

    def __reduce__(self):
        return os._exit, (1,)


def test_a_job_that_kills_every_worker_fails_the_run_after_bounded_attempts(ray_session):
    from fedbench.core.errors import WorkerLostError
    from fedbench.core.types import Payload
    from fedbench.runtime.ray_pool import JOB_ATTEMPTS, RayBackend, RayWorkerPool

    spec = tiny_spec(resources={"backend": "ray", "num_workers": 2})
    dataset = load_dataset("digits")
    scenario = build_scenario(dataset, spec.scenario, spec.seed, spec.rounds)
    algorithm = make_algorithm(spec, scenario.input_shape, dataset.num_classes)
    payloads = dict(algorithm.configure(1, algorithm.init_state(), [0, 1, 2, 3]))
    payloads[2] = Payload({"poison": np.zeros(1)}, {"poison": {"reader": KillsItsReader()}})
    pool = RayWorkerPool(spec.resources, spec.scenario.num_clients)
    backend = RayBackend(dataset, scenario, spec, pool)
    try:
        with pytest.raises(WorkerLostError) as lost:
            backend.run(FIT, 1, payloads, StateStore())
    finally:
        pool.close()
    # the reason a failed run records: one line naming the job, how many workers it took down, and why
    reason = failure_reason(lost.value)
    assert reason.startswith(
        f"WorkerLostError: client 2's fit job of round 1 ran on {JOB_ATTEMPTS} client workers "
        "and each one's process died (ActorDiedError: "
    ), reason
