"""Where results go (`results/` under the working directory unless FEDBENCH_RESULTS says otherwise) and where
runs are tracked (MLFLOW_TRACKING_URI, else an sqlite store in there).

Every output path fedbench derives from a name (a task's, an experiment's, a search space's) is built by
`inside`, which refuses a path that would leave its root: names are checked when a task is loaded, and
this is the second line for names that come from elsewhere (`--experiment`, an existing MLflow store).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fedbench.core.errors import ConfigError


def results_dir() -> Path:
    path = Path(os.environ.get("FEDBENCH_RESULTS", "results")).resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(results_field(), str(path), f"a folder fedbench can create ({exc.strerror})") from None
    return path


def results_field() -> str:
    """What names the results folder in a message: the variable that moved it, else `results/`."""
    return "FEDBENCH_RESULTS" if os.environ.get("FEDBENCH_RESULTS") else "results/"


def check_results_writable() -> None:
    """Before a run or a sweep starts: refuse a results folder (or its sqlite store) that cannot be written, a
    read-only mount or a full disk, rather than fail after the first run trained."""
    folder = results_dir()
    try:
        with tempfile.TemporaryFile(dir=folder) as probe:
            probe.write(bytes(PROBE_BYTES))
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        raise ConfigError(results_field(), str(folder), f"a folder fedbench can write ({exc.strerror})") from None
    uri = tracking_uri()
    store = Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None
    if store is not None and store.is_file() and not os.access(store, os.W_OK):
        raise ConfigError(
            "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else results_field(),
            uri,
            "a tracking store fedbench can write (this file is read-only)",
        )


PROBE_BYTES = 1 << 20
"""What the writability probe writes: a disk with less than this free fails before a run, not in its first round."""


def inside(root: Path, *parts: str) -> Path:
    """`root / parts`, resolved (links and `..` followed); raises ConfigError when it is not inside `root`."""
    root = Path(root).resolve()
    path = root.joinpath(*parts).resolve()
    if not path.is_relative_to(root):
        raise ConfigError(
            "output path", "/".join(parts), f"a path inside {root} (names must not hold '..' or start with '/')"
        )
    return path


def results_path(*parts: str) -> Path:
    """`results/parts`, refused when a name would lead outside `results/`."""
    return inside(results_dir(), *parts)


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI if set, else the embedded sqlite store `results/mlflow.db` (always absolute:
    a relative sqlite URI would follow the working directory, which Ray Tune changes per trial)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{results_dir() / 'mlflow.db'}"


def shown_uri(uri: str) -> str:
    """`uri` as a report prints it: an sqlite store under the working directory by its relative path, so that a
    committed report names no machine's folders."""
    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
        if path.is_absolute() and path.is_relative_to(Path.cwd()):
            return f"sqlite:///{path.relative_to(Path.cwd()).as_posix()}"
    return uri


def store_missing(uri: str) -> bool:
    """An embedded sqlite store that does not exist yet: reading from it must not create an empty one."""
    return uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file()


def check_tracking_uri(uri: str) -> None:
    """Fail at once when a tracking server does not answer (MLflow itself retries for minutes)."""
    if not uri.startswith(("http://", "https://")):
        return
    import urllib.request

    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5).close()
    except OSError as exc:  # URLError, HTTPError and timeouts are all OSErrors
        raise ConfigError("MLFLOW_TRACKING_URI", uri, f"a reachable MLflow tracking server ({exc})") from exc
