"""What a local Ray started by fedbench exposes: its servers listen on every interface (Ray 2.60 cannot bind
them to 127.0.0.1), so they must refuse a client that lacks the token fedbench gave them."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ray

START_LOCAL_RAY = """
import json, sys, psutil, ray
from fedbench.runtime.ray_pool import ensure_ray
ensure_ray(num_cpus=1)
ray.get(ray.remote(lambda: 1).remote())  # a worker process too
listening = [[p.pid, p.name(), c.laddr.ip] for p in psutil.Process().children(recursive=True)
             for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
print(json.dumps({"gcs": ray.get_runtime_context().gcs_address, "listening": listening}), flush=True)
sys.stdin.read()  # until the test closes stdin
ray.shutdown()
"""

CONNECT_WITHOUT_TOKEN = """
import sys, ray
try:
    ray.init(address=sys.argv[1], configure_logging=False)
    print("connected")
except Exception as exc:
    print("refused:", type(exc).__name__)
"""


def test_a_local_ray_refuses_clients_without_its_token(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env["HOME"] = str(tmp_path)  # no ~/.ray/auth_token to fall back on: the token is fedbench's own
    server = subprocess.Popen(
        [sys.executable, "-c", START_LOCAL_RAY],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        started = json.loads(server.stdout.readline())
        assert started["listening"], "found no Ray server sockets to check"
        client = subprocess.run(
            [sys.executable, "-c", CONNECT_WITHOUT_TOKEN, started["gcs"]],
            capture_output=True,
            text=True,
            env={**env, "RAY_AUTH_MODE": "disabled"},
            timeout=120,
        )
        assert "refused: ConnectionError" in client.stdout, client.stdout + client.stderr[-2000:]
        assert "InvalidAuthToken" in client.stderr  # the GCS itself turned it away
        assert not (tmp_path / ".ray" / "auth_token").exists()
    finally:
        server.stdin.close()
        server.wait(timeout=60)
