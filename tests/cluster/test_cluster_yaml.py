"""cluster.yaml as Ray's launcher reads it (offline: `prepare_config` merges the AWS defaults, `validate_config`
checks the schema), and the promises the README makes about it: the node types it names, MLflow on the head's
private IP with a PostgreSQL store, the checkout (tasks/, search_spaces/) on every node, dependencies
installed from pyproject.toml, one Ray token and one tracking URI on every node."""

from __future__ import annotations

import copy
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from jsonschema.exceptions import ValidationError

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_YAML = ROOT / "cluster.yaml"
REMOTE_HOME = "/home/ubuntu"


def raw_config() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def prepared(config: dict) -> dict:
    """What `ray up` acts on: the provider's defaults merged in, then validated (raises when invalid)."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = prepare_config(copy.deepcopy(config))
    validate_config(config)
    return config


@pytest.fixture(scope="module")
def cluster() -> dict:
    return prepared(raw_config())


def head_commands(cluster: dict) -> list[str]:
    return cluster["head_setup_commands"] + cluster["head_start_ray_commands"]


def worker_commands(cluster: dict) -> list[str]:
    return cluster["worker_setup_commands"] + cluster["worker_start_ray_commands"]


def mlflow_server_command(cluster: dict) -> str:
    found = [c for c in cluster["head_setup_commands"] if "mlflow server" in c]
    assert len(found) == 1, "exactly one head setup command starts the MLflow server"
    return found[0]


def option(command: str, name: str) -> str:
    match = re.search(rf"{name}[ =](\S+)", command)
    assert match, f"{name} missing from: {command}"
    return match.group(1).strip("\"'")


def test_ray_accepts_the_file(cluster):
    assert cluster["provider"]["type"] == "aws"
    assert cluster["head_node_type"] in cluster["available_node_types"]


@pytest.mark.parametrize("breakage", ["misspelt node_config", "unknown head type", "unknown top-level key"])
def test_ray_refuses_a_broken_copy(breakage):
    """The validation above can fail: the same file with one mistake a user could make is refused."""
    config = raw_config()
    if breakage == "misspelt node_config":
        config["available_node_types"]["worker.gpu"]["node_confg"] = config["available_node_types"]["worker.gpu"].pop(
            "node_config"
        )
    elif breakage == "unknown head type":
        config["head_node_type"] = "head.gpu"
    else:
        config["setup_comands"] = config.pop("setup_commands")
    with pytest.raises((ValidationError, ValueError)):  # Ray's schema check, or its own check of the head type
        prepared(config)


def test_node_types_are_a_cpu_head_and_autoscaling_gpu_and_cpu_workers(cluster):
    types = cluster["available_node_types"]
    head = types[cluster["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0 and not head["node_config"]["InstanceType"].startswith(("g", "p"))
    assert types["worker.gpu"]["node_config"]["InstanceType"] == "g5.xlarge"
    assert types["worker.gpu"]["min_workers"] < types["worker.gpu"]["max_workers"]  # autoscaling
    assert not types["worker.cpu"]["node_config"]["InstanceType"].startswith(("g", "p"))


def readme_cluster_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Running on a cluster")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_the_node_and_instance_types_the_readme_names_exist(cluster):
    section = readme_cluster_section()
    named_types = set(re.findall(r"`((?:head|worker)\.\w+)`", section))
    assert named_types == set(cluster["available_node_types"]), "README and cluster.yaml name the same node types"
    instances = {t["node_config"]["InstanceType"] for t in cluster["available_node_types"].values()}
    assert instances <= set(re.findall(r"\b([a-z]\d[a-z]?\.\d*x?large)\b", section)), (
        "every instance type has its price"
    )
    assert "ray up cluster.yaml" in section and "ray down cluster.yaml" in section
    assert "ray job submit --address" in section and "fedbench sweep tasks/feroma_drift.yaml" in section


def test_mlflow_listens_on_the_heads_private_ip_with_a_postgresql_store(cluster):
    server = mlflow_server_command(cluster)
    host = option(server, "--host")
    assert host == "$HEAD_IP" and "HEAD_IP=$(hostname -I | awk '{print $1}')" in server  # the private address
    assert "--backend-store-uri" not in server and "EnvironmentFile=/etc/fedbench-mlflow.env" in server
    store = [c for c in cluster["head_setup_commands"] if "MLFLOW_BACKEND_STORE_URI=" in c]
    assert len(store) == 1 and "/etc/fedbench-mlflow.env" in store[0] and "install -m 600" in store[0]  # the password
    assert (
        "MLFLOW_BACKEND_STORE_URI=postgresql://mlflow:%s@127.0.0.1:5432/mlflow" in store[0]
    )  # PostgreSQL on localhost
    commands = " ".join(head_commands(cluster) + worker_commands(cluster) + cluster["setup_commands"])
    assert "0.0.0.0" not in commands
    assert option(" ".join(cluster["head_start_ray_commands"]), "--dashboard-host") == "127.0.0.1"
    head_setup = " ".join(cluster["head_setup_commands"])
    assert "apt-get install -y -qq postgresql" in head_setup and "psycopg2" not in head_setup  # psycopg 3: pyproject
    assert "CREATE ROLE mlflow" in head_setup and "createdb -O mlflow mlflow" in head_setup


def test_every_node_gets_the_tracking_uri_of_that_server(cluster):
    port = option(mlflow_server_command(cluster), "--port")
    head_uri = [c for c in cluster["head_setup_commands"] if "MLFLOW_TRACKING_URI" in c]
    worker_uri = [c for c in cluster["worker_setup_commands"] if "MLFLOW_TRACKING_URI" in c]
    assert head_uri and f"http://$(hostname -I | awk '{{print $1}}'):{port}" in head_uri[0]
    assert worker_uri and f"http://$RAY_HEAD_IP:{port}" in worker_uri[0]
    assert all("~/.fedbench_env" in c for c in head_uri + worker_uri)
    assert any(". ~/.fedbench_env" in c and "~/.bashrc" in c for c in cluster["setup_commands"])


def test_every_node_gets_the_same_ray_token(cluster):
    assert cluster["file_mounts"][f"{REMOTE_HOME}/.ray/auth_token"] == "~/.ray/auth_token"
    starts = cluster["head_start_ray_commands"] + cluster["worker_start_ray_commands"]
    assert all("RAY_AUTH_MODE=token" in c for c in starts if "ray start" in c)


def checkout_mount(cluster: dict) -> str:
    mounts = {
        remote: (ROOT / local).resolve()
        for remote, local in cluster["file_mounts"].items()
        if not local.startswith("~")
    }
    found = [remote for remote, local in mounts.items() if local == ROOT]
    assert len(found) == 1, f"one file mount carries the repository root: {cluster['file_mounts']}"
    return found[0]


@pytest.mark.parametrize("folder", ["tasks", "search_spaces", "fedbench"])
def test_the_checkout_with_tasks_and_search_spaces_reaches_every_node(cluster, folder):
    """Every file of the folder passes the mount's filters (rsync_exclude, and .gitignore as rsync_filter;
    matched with the gitignore rules Ray itself applies to a job's working directory), while the
    virtualenv, results and .git stay behind."""
    from ray._private.runtime_env.packaging import _get_excludes, _get_ignore_file

    checkout_mount(cluster)
    assert ".gitignore" in cluster["rsync_filter"]
    dropped = [_get_excludes(ROOT, cluster["rsync_exclude"]), _get_ignore_file(ROOT, ".gitignore")]
    files = [p for p in (ROOT / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert files
    assert not [p for p in files if any(match(p) for match in dropped)]
    for left_behind in (".venv/bin/python", "results/mlflow.db", ".git/HEAD", "fedbench/__pycache__/x.pyc"):
        assert any(match(ROOT / left_behind) for match in dropped), f"{left_behind} would be copied to every node"


def test_dependencies_are_installed_from_the_repositorys_pyproject(cluster):
    remote_root = checkout_mount(cluster)
    installs = [c for c in cluster["setup_commands"] if "pip install" in c and "-e" in c]
    assert installs, "a setup command installs the checkout"
    editable = option(installs[0].replace("$HOME", REMOTE_HOME), "-e")
    assert editable == f"{remote_root}[cluster]", (
        "the installed package is the synced checkout, with its pyproject's pins"
    )
    pinned = re.compile(r"\b(torch|torchvision|ray|mlflow)(\[[\w,]+\])?\s*[=<>~!]")
    for command in cluster["setup_commands"] + cluster["head_setup_commands"] + cluster["worker_setup_commands"]:
        assert not pinned.search(command), f"a second pin that could drift from pyproject.toml: {command}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {re.match(r"[\w\[\],-]+", d).group(0): d for d in project["dependencies"]}
    for package in ("torch", "torchvision", "ray[tune]", "mlflow"):
        assert re.fullmatch(rf"{re.escape(package)}>=[\d.]+,<[\d.]+", pins[package]), f"{package} is pinned"
    cluster_ray = [d for d in project["optional-dependencies"]["cluster"] if d.startswith("ray[")]
    assert cluster_ray == [pins["ray[tune]"].replace("ray[tune]", "ray[default]")], (
        "the cluster extra's Ray is the same"
    )


def test_every_command_is_valid_bash(cluster):
    keys = [
        "setup_commands",
        "head_setup_commands",
        "worker_setup_commands",
        "head_start_ray_commands",
        "worker_start_ray_commands",
        "initialization_commands",
    ]
    for command in (c for key in keys for c in cluster[key]):
        checked = subprocess.run(["bash", "-n", "-c", command], capture_output=True, text=True)
        assert checked.returncode == 0, f"{command}: {checked.stderr}"


def test_the_header_and_docs_walk_a_first_ray_up_as_aws_needs_it():
    """Issue 31: the header recommended `ray attach -p 5000` (which finds nothing), and the docs left out the GPU quota
    of new accounts, that the S3 policy's role exists only after the first `ray up`, and what a first run costs."""
    header = (ROOT / "cluster.yaml").read_text().split("\ncluster_name")[0]
    assert "ray attach cluster.yaml -p 5000` or" not in header and "ssh -L 5000:<head private IP>:5000" in header
    docs = (ROOT / "docs" / "cluster.md").read_text()
    first = docs[docs.index("## Your first `ray up`") : docs.index("## Network and security")]
    assert "--quota-code L-DB2E81BA" in first  # Running On-Demand G and VT instances
    assert first.index("ray up cluster.yaml") < first.index("put-role-policy --role-name ray-autoscaler-v1")
    assert first.count("$BUCKET") >= 3 and "BUCKET=" in first  # one name, used by every command
    assert "each g5.xlarge about $1.01" in " ".join(first.split()) and "ray down cluster.yaml" in first


FAKE_MPS_CONTROL = """#!/bin/bash
# the daemon: a process that stays, its pid where the real one writes it, and a line per start
[ "$1" = "-d" ] || exit 2
sleep 300 > /dev/null 2>&1 &
echo $! > "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
echo "started $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY" >> "$STARTS"
"""


def test_a_gpu_node_starts_one_mps_daemon_before_ray_and_a_cpu_node_none(cluster, tmp_path):
    """The MPS command as a node runs it, with `nvidia-smi` and `nvidia-cuda-mps-control` stand-ins on PATH."""
    starts = cluster["worker_start_ray_commands"]
    [mps] = [c for c in starts if "nvidia-cuda-mps-control -d" in c]
    assert starts.index(mps) < next(i for i, c in enumerate(starts) if "ray start" in c)  # before Ray
    assert any("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" in c for c in cluster["worker_setup_commands"])  # Ray's env
    pipe = tmp_path / "pipe"
    command = mps.replace("/tmp/nvidia-mps-log", str(tmp_path / "log")).replace("/tmp/nvidia-mps", str(pipe))
    bin_gpu, bin_cpu = tmp_path / "gpu-bin", tmp_path / "cpu-bin"
    for folder in (bin_gpu, bin_cpu):
        folder.mkdir()
        (folder / "nvidia-cuda-mps-control").write_text(FAKE_MPS_CONTROL)
        (folder / "nvidia-cuda-mps-control").chmod(0o755)
    (bin_gpu / "nvidia-smi").write_text("#!/bin/bash\necho 'GPU 0: NVIDIA A10G'\n")
    (bin_gpu / "nvidia-smi").chmod(0o755)
    log = tmp_path / "starts.txt"

    def node(bin_folder):
        env = {"PATH": f"{bin_folder}:/usr/bin:/bin", "STARTS": str(log), "HOME": str(tmp_path)}
        subprocess.run(["bash", "-c", command], env=env, check=True)
        return log.read_text().splitlines() if log.exists() else []

    try:
        assert node(bin_cpu) == []  # no GPU: no daemon
        assert node(bin_gpu) == [f"started {pipe} {tmp_path / 'log'}"] and (tmp_path / "log").is_dir()
        assert len(node(bin_gpu)) == 1  # `ray up` again: the daemon still runs, none is added
        daemon = int((pipe / "nvidia-cuda-mps-control.pid").read_text())
        subprocess.run(["kill", str(daemon)], check=True)
        subprocess.run(["bash", "-c", f"while kill -0 {daemon} 2> /dev/null; do sleep 0.1; done"], timeout=10)
        assert len(node(bin_gpu)) == 2  # a daemon that died is started again
    finally:
        pid_file = pipe / "nvidia-cuda-mps-control.pid"
        if pid_file.exists():
            subprocess.run(["kill", pid_file.read_text().strip()])
