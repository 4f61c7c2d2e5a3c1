"""`fedbench ui`: MLflow's web UI over the results store, bound to 127.0.0.1 on a free port.

It is MLflow's own server (`mlflow server`, one worker, no job runner) started in a process group of its own, so
that stopping it stops exactly what was started. A tracking server (an http URI) already serves its UI at its own
address, so only a local store is served here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from fedbench.core.errors import ConfigError, FedbenchError
from fedbench.tracking.paths import results_path, store_missing, tracking_uri

MODEL_TRAINING_HINT = (
    'In MLflow 3\'s UI, switch the toggle at the top left from "GenAI" to "Model training" to see '
    "the runs and their per-round charts"
)


@dataclass
class UiServer:
    """A running UI: its address and the server process this started."""

    url: str
    store: str
    process: subprocess.Popen
    log: IO[bytes]

    def stop(self) -> None:
        """Stop the server's process group (only what `start_ui` started)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        self.log.close()


def start_ui(uri: str | None = None, port: int | None = None, timeout_s: float = 180.0) -> UiServer:
    """MLflow's UI over `uri` (default: where `fedbench run` records), answering at the returned server's `url`.

    Raises:
        ConfigError: the store is a tracking server or does not exist yet.
        FedbenchError: the server exited or did not answer within `timeout_s` (its log's end is in the message).
    """
    uri = uri or tracking_uri()
    if uri.startswith(("http://", "https://")):
        raise ConfigError(
            "MLFLOW_TRACKING_URI", uri, "a local store: a tracking server serves its UI at its own address"
        )
    if store_missing(uri):
        raise ConfigError("store", uri, "an existing store: `fedbench run` or `fedbench sweep` makes one")
    return serve_store(uri, results_path("mlartifacts"), port, timeout_s)


def serve_store(uri: str, artifacts: Path, port: int | None = None, timeout_s: float = 180.0) -> UiServer:
    """A real `mlflow server` over the backend store `uri` (sqlite or PostgreSQL), artifacts under `artifacts`,
    on 127.0.0.1 (a free port unless `port`); returned once its /health answers. The tests' tracking servers
    are these too."""
    port = free_port() if port is None else checked_port(port)
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        uri,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--artifacts-destination",
        str(artifacts),
    ]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = tempfile.TemporaryFile()  # not a pipe: a server logging more than a pipe holds would block
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    server = UiServer(f"http://127.0.0.1:{port}", uri, process, log)
    try:
        wait_until_healthy(server, timeout_s)
        if server.process.poll() is not None:  # what answered is another server on that port, not ours
            raise ConfigError("--port", port, f"a free port: another server answers at {server.url}")
    except BaseException:
        server.stop()
        raise
    return server


def checked_port(port: int) -> int:
    """`port` if this machine can serve on it at 127.0.0.1.

    Raises:
        ConfigError: out of 1..65535, or already taken (another UI, say), naming the port.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigError("--port", port, "a port number in 1..65535, or none for a free one")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # as the server binds: a port a stopped server left in TIME_WAIT is free, one something listens on is not
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ConfigError("--port", port, f"a free port ({exc.strerror}: something already serves on it)") from None
    return port


def wait_until_healthy(server: UiServer, timeout_s: float) -> None:
    """Return once the server's /health answers; raise FedbenchError if it exits or stays silent."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"{server.url}/health", timeout=2).status == 200:
                return
        except OSError:
            time.sleep(0.5)
        if server.process.poll() is not None:
            server.log.seek(0)
            tail = server.log.read().decode(errors="replace").strip().splitlines()[-5:]
            raise FedbenchError(f"MLflow's UI server exited with code {server.process.returncode}: " + " | ".join(tail))
    raise FedbenchError(f"MLflow's UI server did not answer at {server.url} within {timeout_s:.0f} s")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
