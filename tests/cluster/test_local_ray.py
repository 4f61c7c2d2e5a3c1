"""A local Ray that fedbench starts is its own, even while another cluster runs on the host: `ray start` and
`ray.cluster_utils.Cluster` record their address in /tmp/ray/ray_current_cluster, and `ray.init()` without
an address joins whatever is recorded there (someone else's cluster, or a test's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
from fedbench.runtime.ray_pool import ensure_ray
import ray
ensure_ray(num_cpus=1)
print("GCS", ray.get_runtime_context().gcs_address)
ray.shutdown()
"""


@pytest.mark.ray
def test_ensure_ray_starts_its_own_ray_beside_a_running_cluster(monkeypatch):
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    cluster = Cluster(
        initialize_head=True,
        connect=False,
        head_node_args={"num_cpus": 1, "object_store_memory": 80 * 2**20, "include_dashboard": False},
    )
    try:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"PYTHONPATH": str(ROOT)}
        probe = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    finally:
        cluster.shutdown()
    assert probe.returncode == 0, probe.stderr[-2000:]
    started = [line.split()[1] for line in probe.stdout.splitlines() if line.startswith("GCS ")]
    assert started and started[0] != cluster.address, "fedbench joined the running cluster instead of starting its own"
