"""One number per RunSpec (issue 42, item 4): a run's metrics do not depend on the CPUs it reserves, and what they
still depend on (torch and the CPU's kernels) is recorded with it. The case is chosen so that numerics matter:
LeNet-5 at momentum 0.9 on 2-class clients that drift every round, where any change in the order of a reduction
shows in the metrics after a few rounds (the test proves it is such a case by changing only the thread count)."""

from __future__ import annotations

import os

import pytest
import torch

from fedbench.config.task import resolve_run
from fedbench.core.callbacks import NUMERICS_TAG
from fedbench.runtime import run_spec
from fedbench.runtime import worker as worker_module
from tests.conftest import TINY, tiny_spec
from tests.runtime.test_checkpoint import numbers

CHAOTIC = {
    "dataset": {"name": "synthetic_images", "train_samples": 4000, "test_samples": 200, "noise": 120.0},
    "model": "lenet5",
    "scenario": {"preset": "feroma/label_skew/medium", "num_clients": 4, "drift_every": 1},
    "rounds": 3,
    "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
}


def history(**resources):
    result = run_spec(resolve_run({**TINY, **CHAOTIC, "resources": {"backend": "serial", **resources}}))
    assert result.status == "FINISHED", result.reason
    return numbers(result.history), result


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="two threads on one core may add in one order")
def test_the_cpus_a_run_reserves_do_not_change_its_numbers_where_the_thread_count_would(monkeypatch):
    one, result = history(client_cpus=1)
    assert result.tags[NUMERICS_TAG] == worker_module.numerics("cpu")
    assert history(client_cpus=2)[0] == one and history(client_cpus=0.5)[0] == one
    monkeypatch.setattr(worker_module, "JOB_THREADS", 2)  # what client_cpus=2 used to mean: two threads a job
    assert history(client_cpus=2)[0] != one, "not a case where the thread count shows: the test proves nothing"


def test_a_run_records_what_its_numbers_depend_on_besides_its_spec():
    result = run_spec(tiny_spec(rounds=1))
    recorded = result.tags[NUMERICS_TAG]
    assert recorded.startswith(f"torch {torch.__version__}, cpu {torch.backends.cpu.get_cpu_capability()}")
    assert recorded.endswith("1 thread")
