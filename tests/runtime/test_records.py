"""A round's training metrics from its client results."""

import pytest

from fedbench.core import metrics as M
from fedbench.core.types import ClientResult, Payload
from fedbench.runtime.federation import Federation
from fedbench.runtime.records import training_metrics
from tests.conftest import tiny_spec


def result(cid, loss, seconds, gpu_peak_bytes=0):
    return ClientResult(cid, Payload(), {M.TRAIN_LOSS: loss}, seconds, gpu_peak_bytes)


def test_the_peak_gpu_memory_is_the_largest_workers_in_mib():
    record = training_metrics([result(0, 1.0, 0.5, 300 * 2**20), result(1, 3.0, 0.25, 500 * 2**20)])
    assert record == {
        M.TRAIN_LOSS_MEAN: 2.0,
        M.TIME_CLIENT_COMPUTE_S: 0.75,
        M.CLIENTS_SAMPLED: 2.0,
        M.GPU_PEAK_MB: 500.0,
    }


def test_a_run_on_cpu_records_no_gpu_memory():
    assert M.GPU_PEAK_MB not in training_metrics([result(0, 1.0, 0.5)])
    run = Federation(tiny_spec(rounds=1), backend="serial").run()
    assert run.status == "FINISHED" and all(M.GPU_PEAK_MB not in record for record in run.history)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_a_run_on_a_gpu_records_each_rounds_peak_memory():
    run = Federation(tiny_spec(rounds=2, resources={"backend": "serial", "client_gpus": 1}), backend="serial").run()
    assert run.status == "FINISHED", run.reason
    assert all(record[M.GPU_PEAK_MB] > 0 for record in run.history)
