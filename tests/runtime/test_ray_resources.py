"""Client workers against the cluster's nodes, and what a run records about where its clients trained (no Ray)."""

import pytest

from fedbench.core.errors import ConfigError
from fedbench.core.runspec import ResourceSpec
from fedbench.runtime import Federation
from fedbench.runtime.placement import placement_tags
from fedbench.runtime.ray_resources import check_worker_fits
from tests.conftest import tiny_spec

CPU_HEAD = {"CPU": 2.0}
GPU_NODE = {"CPU": 3.0, "GPU": 2.0}


@pytest.mark.parametrize(
    "resources",
    [
        ResourceSpec(client_cpus=0.25, client_gpus=0.25),
        ResourceSpec(client_gpus=1),
        ResourceSpec(client_gpus=2),
        ResourceSpec(client_cpus=3),
        ResourceSpec(),
    ],
)
def test_a_worker_one_node_can_hold_is_accepted(resources):
    check_worker_fits(resources, [CPU_HEAD, GPU_NODE])


@pytest.mark.parametrize(
    "resources,nodes,refusal",
    [
        (ResourceSpec(client_gpus=1.5), [CPU_HEAD, GPU_NODE], r"client_gpus: got 1\.5.*share of one GPU in \(0, 1\]"),
        (ResourceSpec(client_gpus=0.5), [CPU_HEAD, CPU_HEAD], r"client_gpus: got 0\.5.*has 4 CPU, 0 GPU in all"),
        (
            ResourceSpec(client_gpus=2),
            [{"CPU": 2.0, "GPU": 1.0}] * 2,  # two GPUs in all, but not on one node
            r"client_gpus: got 2;.*one Ray node can hold.*2 nodes \(2 CPU, 1 GPU; 2 CPU, 1 GPU\)",
        ),
        (
            ResourceSpec(client_cpus=3, client_gpus=1),
            [{"CPU": 4.0}, {"CPU": 1.0, "GPU": 1.0}],  # the GPU node lacks CPUs
            r"client_cpus: got 3;.*one client worker needs 3 CPU, 1 GPU",
        ),
    ],
)
def test_a_worker_no_node_can_hold_is_refused_naming_the_field_and_the_nodes(resources, nodes, refusal):
    with pytest.raises(ConfigError, match=refusal):
        check_worker_fits(resources, nodes)


def test_the_device_summary_stays_one_line_however_many_clients():
    simulated = [{"node": "n1", "gpu_ids": str(i % 2), "device": "cpu"} for i in range(8)]
    tags = placement_tags(simulated, 10_000)
    assert tags["clients.device"] == "cpu: 10000 clients on 8 workers (simulated GPUs 0,1)"
    assert tags["workers.7.gpu_ids"] == "1" and len(tags) == 8 * 3 + 1
    mixed = [
        {"node": "n1", "gpu_ids": "0", "device": "cuda", "mps": "no"},
        {"node": "n2", "gpu_ids": "", "device": "cpu"},
    ]
    assert placement_tags(mixed, 20)["clients.device"] == "20 clients on cpu: 1 worker; cuda: 1 worker (GPU 0, no MPS)"


def test_a_serial_run_records_the_device_its_clients_trained_on():
    result = Federation(tiny_spec(rounds=1), backend="serial").run()
    assert result.status == "FINISHED", result.reason
    assert result.tags["workers.0.device"] == "cpu" and result.tags["workers.0.gpu_ids"] == ""
    assert result.tags["clients.device"] == "cpu: 4 clients on 1 worker"
