"""Real parts for the cluster tests: a PostgreSQL server, an `mlflow server` over it, and a two-node Ray
cluster on this machine (a head, and a worker node declaring two simulated GPUs).

Everything is started here and stopped here by its own handle (data folder, process group, Cluster object),
never by name: other test sessions on the machine run their own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from fedbench.tracking.ui import free_port
from tests.conftest import serving_mlflow

HEAD_CPUS = 2
"""The head node's CPUs: one 2-CPU trial at a time, so a second concurrent trial must go to the worker node."""

WORKER_CPUS = 3
"""The worker node's CPUs: one 2-CPU trial, or one trial of eight 0.25-CPU client workers and its driver."""

WORKER_GPUS = 2
"""Simulated GPUs of the worker node: Ray schedules on them, torch sees none."""

OBJECT_STORE_BYTES = 256 * 1024**2
"""Each node's object store: the tests ship digits (a few MB), and the default (30% of RAM per node) is far more."""


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs: Debian's newest /usr/lib/postgresql/<version>/bin, else
    the folder of an `initdb` on PATH (other distributions); None when PostgreSQL is not installed."""
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0
    )
    if debian:
        return debian[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


@dataclass(frozen=True)
class Postgres:
    """A running PostgreSQL on 127.0.0.1 with one database for MLflow."""

    bin: Path
    port: int
    database: str
    as_owner: tuple[str, ...]

    @property
    def uri(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{self.database}"

    def query(self, sql: str) -> list[list[str]]:
        """Rows of `sql`, read with psql straight from the database (not through MLflow)."""
        out = subprocess.run(
            [
                *self.as_owner,
                str(self.bin / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                self.database,
                "-tA",
                "-F",
                "\t",
                "-c",
                sql,
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return [line.split("\t") for line in out.splitlines() if line]


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL cluster of its own: `initdb` in a temp folder owned by the `postgres` user (the server
    refuses to run as root), listening on a free port of 127.0.0.1 only, with its socket in that folder;
    stopped (`pg_ctl stop -m fast` on its data folder) and deleted at the end."""
    bin = postgres_bin()
    if bin is None:
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql; .ci/run installs it)")
    pytest.importorskip(
        "psycopg", reason="MLflow's PostgreSQL driver is in the postgres extra: pip install -e '.[test]'"
    )
    as_owner = ("runuser", "-u", "postgres", "--") if os.geteuid() == 0 else ()
    folder = Path(tempfile.mkdtemp(prefix="fedbench-postgres-"))
    if as_owner:
        shutil.chown(folder, "postgres", "postgres")
    data, port = folder / "data", free_port()

    def run(*args: str) -> None:
        subprocess.run([*as_owner, *args], check=True, capture_output=True, cwd=folder)

    run(str(bin / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c fsync=off"
    try:
        run(str(bin / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "server.log"), "-w", "start")
        run(str(bin / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "mlflow")
        yield Postgres(bin, port, "mlflow", as_owner)
    finally:
        subprocess.run(
            [*as_owner, str(bin / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
            capture_output=True,
            cwd=folder,
        )
        shutil.rmtree(folder)


@pytest.fixture(scope="session")
def mlflow_server(postgres, tmp_path_factory):
    """Here `mlflow server` stores runs in the PostgreSQL above (the production setup of cluster.yaml), its
    artifacts in a temp folder; it replaces the sqlite-backed fixture of tests/conftest.py for these tests."""
    with serving_mlflow(postgres.uri, tmp_path_factory.mktemp("mlflow_artifacts")) as url:
        yield url


@dataclass(frozen=True)
class TwoNodes:
    address: str
    head: str
    """Node id of the head (where the test process and the Tune driver run)."""
    worker: str
    """Node id of the worker node, the one with the simulated GPUs."""


@pytest.fixture(scope="module")
def two_node_cluster():
    """A head and a worker node (with `WORKER_GPUS` simulated GPUs) on this machine, this process connected to it
    (Ray 2.60 cannot bind its servers to 127.0.0.1 only: ray_pool.ensure_ray).

    A local Ray the session started before (`ray_session`) is shut down first, since a process joins one Ray at a
    time, and started again afterwards for the tests that follow.
    """
    import ray
    from ray.cluster_utils import Cluster

    from fedbench.runtime.ray_pool import ensure_ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    had_local_ray = ray.is_initialized()
    if had_local_ray:
        ray.shutdown()
    common = {"object_store_memory": OBJECT_STORE_BYTES}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**common, "num_cpus": HEAD_CPUS, "num_gpus": 0, "include_dashboard": False},
    )
    try:
        worker = cluster.add_node(**common, num_cpus=WORKER_CPUS, num_gpus=WORKER_GPUS)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        yield TwoNodes(cluster.address, cluster.head_node.node_id, worker.node_id)
    finally:
        ray.shutdown()
        cluster.shutdown()
        if had_local_ray:
            ensure_ray(num_cpus=2)
