"""Client workers that outlive a trial: Tune hands a finished trial's process, with the workers it started, to the
next trial (`reuse_actors`, fedbench.tuning.trial). The next trial must see nothing of the last one: not its model,
its optimizer's momentum, its clients' state (Ditto's personal models, SCAFFOLD's control variates) nor its data."""

import pytest
import yaml

from fedbench.config import load_task
from fedbench.runtime import Federation
from fedbench.runtime.ray_pool import RayWorkerPool
from fedbench.tuning import make_plan, run_sweep
from tests.conftest import TINY, tiny_spec

pytestmark = pytest.mark.ray

STATEFUL = ("ditto", "scaffold", "fedprox")
"""Methods whose workers keep a personal model, control variates or a proximal anchor between a client's jobs."""


def numbers(history):
    return [{k: v for k, v in record.items() if not k.startswith("time_")} for record in history]


def stateful_run(name, seed):
    momentum = 0.0 if name == "scaffold" else 0.9  # SCAFFOLD's control variates are for plain SGD
    return tiny_spec(
        algorithm=name,
        seed=seed,
        rounds=3,
        resources={"backend": "ray", "num_workers": 2},
        optimizer={"name": "sgd", "lr": 0.05, "momentum": momentum},
    )


def test_a_run_on_workers_other_runs_trained_has_the_numbers_of_the_run_alone(ray_session):
    earlier = [stateful_run(name, seed=7) for name in STATEFUL]
    later = [stateful_run(name, seed=1) for name in reversed(STATEFUL)]
    pool = RayWorkerPool(earlier[0].resources, 4)
    try:
        shared, pids = [], set()
        for one in earlier + later:
            federation = Federation(one, pool=pool)
            shared.append(federation.run())
            pids.add(tuple(federation.worker_pids))
    finally:
        pool.close()
    assert len(pids) == 1  # every run on the same two processes
    for run in shared[len(earlier) :]:
        alone = Federation(run.spec, backend="serial").run()  # a fresh worker in this process
        assert run.status == alone.status == "FINISHED"
        assert numbers(run.history) == numbers(alone.history), run.spec.algorithm.name


def test_a_sweep_whose_trials_share_one_process_and_its_workers_matches_each_run_alone(
    tmp_path, mlflow_store, ray_session
):
    task = {
        **TINY,
        "name": "reuse_test",
        "rounds": 2,
        "resources": {"client_cpus": 0.5, "num_workers": 1},
        "grid": {"algorithm": ["ditto", "fedprox", "fedavg"]},
        "seeds": [0, 1],
    }
    task.pop("task")
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    plan = make_plan(load_task(path))
    outcome = run_sweep(plan, max_concurrent=1)  # one trial at a time: each next trial reuses the last one's process
    assert sorted(r.status for r in outcome.results) == ["FINISHED"] * 6
    workers = {r.tags["workers.0.pid"] for r in outcome.results}
    assert len(workers) < len(outcome.results)  # trials did run on workers an earlier trial had trained on
    for result in outcome.results:
        alone = Federation(result.spec, backend="serial").run()
        assert numbers(result.history) == numbers(alone.history), result.spec.label
