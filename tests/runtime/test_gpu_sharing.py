"""MPS detection against a fake pipe directory, the placement tags that carry it, and the shared-GPU warning."""

import socket
import warnings

import pytest

from fedbench.runtime.gpu_sharing import SharedGpuCheck, SharedGpuWarning, mps_daemon_listening, unshared_gpus
from fedbench.runtime.placement import placement_tags, places_from_tags, worker_place


@pytest.fixture
def pipe_directory(tmp_path):
    folder = tmp_path / "mps"  # a short path: a unix socket's path is limited to about 100 bytes
    folder.mkdir()
    return folder


def listening_control_socket(folder, kind=socket.SOCK_SEQPACKET):
    """What the MPS control daemon opens (a SOCK_SEQPACKET socket in CUDA 13)."""
    server = socket.socket(socket.AF_UNIX, kind)
    server.bind(str(folder / "control"))
    server.listen(4)
    return server


def test_mps_is_detected_where_a_daemon_listens_in_the_pipe_directory(pipe_directory):
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(pipe_directory)}
    assert not mps_daemon_listening(env)  # no socket yet
    server = listening_control_socket(pipe_directory)
    try:
        assert mps_daemon_listening(env)
        assert not mps_daemon_listening({"CUDA_MPS_PIPE_DIRECTORY": str(pipe_directory / "elsewhere")})
    finally:
        server.close()
    assert not mps_daemon_listening(env)  # the socket file a dead daemon left behind refuses connections
    (pipe_directory / "control").unlink()
    server = listening_control_socket(pipe_directory, socket.SOCK_STREAM)  # a daemon of another socket type
    try:
        assert mps_daemon_listening(env)
    finally:
        server.close()


def test_the_default_pipe_directory_is_cudas(monkeypatch):
    from fedbench.runtime.gpu_sharing import mps_pipe_directory

    assert str(mps_pipe_directory({})) == "/tmp/nvidia-mps"
    assert str(mps_pipe_directory({"CUDA_MPS_PIPE_DIRECTORY": "/run/mps"})) == "/run/mps"


def test_a_cuda_workers_place_says_whether_mps_runs(pipe_directory, monkeypatch):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(pipe_directory))
    assert worker_place("cuda")["mps"] == "no"
    server = listening_control_socket(pipe_directory)
    try:
        assert worker_place("cuda")["mps"] == "yes"
        assert "mps" not in worker_place("cpu")  # no CUDA context, nothing to say
    finally:
        server.close()


def cuda_place(pid, gpu="0", mps="no", node="n1"):
    return {"node": node, "gpu_ids": gpu, "device": "cuda", "pid": str(pid), "mps": mps}


def test_the_summary_line_and_tags_say_mps():
    tags = placement_tags([cuda_place(i, mps="yes") for i in range(8)], 20)
    assert tags["clients.device"] == "cuda: 20 clients on 8 workers (GPU 0, MPS)"
    assert tags["workers.7.mps"] == "yes" and tags["workers.7.pid"] == "7"
    assert (
        placement_tags([cuda_place(i) for i in range(2)], 4)["clients.device"]
        == "cuda: 4 clients on 2 workers (GPU 0, no MPS)"
    )
    mixed = [cuda_place(0, mps="yes"), cuda_place(1, gpu="1"), cuda_place(2, gpu="1")]
    assert placement_tags(mixed, 6)["clients.device"] == "cuda: 6 clients on 3 workers (GPUs 0,1, MPS on 1 of 3)"
    assert places_from_tags(placement_tags(mixed, 6)) == mixed


def test_only_gpus_that_two_workers_share_without_mps_count():
    assert unshared_gpus([cuda_place(1), cuda_place(2, gpu="1")]) == {}  # one worker per GPU
    assert unshared_gpus([cuda_place(1, mps="yes"), cuda_place(2, mps="yes")]) == {}
    assert unshared_gpus([cuda_place(1), cuda_place(2)]) == {("n1", "0"): {"1", "2"}}
    assert unshared_gpus([cuda_place(1), cuda_place(2, node="n2")]) == {}  # GPU 0 of two nodes
    cpu = [{"node": "n1", "gpu_ids": "0", "device": "cpu", "pid": str(i)} for i in range(4)]  # simulated GPUs
    assert unshared_gpus(cpu) == {}


def test_the_warning_comes_once_and_counts_a_reused_worker_once():
    check = SharedGpuCheck()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check.add([cuda_place(1)])
        check.add([cuda_place(1)])  # the next trial on the same worker: still one worker on GPU 0
        assert not caught
        check.add([cuda_place(2)])  # another trial's worker on the same GPU
        check.add([cuda_place(3), cuda_place(4)])  # said already
    [warning] = caught
    assert warning.category is SharedGpuWarning
    message = str(warning.message)
    assert "2 client workers share GPU 0 of node n1 without CUDA MPS" in message
    assert "nvidia-cuda-mps-control -d" in message and "0.69 s" in message
