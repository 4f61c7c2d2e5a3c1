"""Where results go (`results/` under the working directory unless FEDBENCH_RESULTS says otherwise) and where
runs are tracked (MLFLOW_TRACKING_URI, else an sqlite store in there).

Every output path fedbench derives from a name (a task's, an experiment's, a search space's) is built by
`inside`, which refuses a path that would leave its root: names are checked when a task is loaded, and
this is the second line for names that come from elsewhere (`--experiment`, an existing MLflow store).
"""

from __future__ import annotations

import os
from pathlib import Path

from fedbench.core.errors import ConfigError


def results_dir() -> Path:
    path = Path(os.environ.get("FEDBENCH_RESULTS", "results")).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def inside(root: Path, *parts: str) -> Path:
    """`root / parts`, resolved (links and `..` followed); raises ConfigError when it is not inside `root`."""
    root = Path(root).resolve()
    path = root.joinpath(*parts).resolve()
    if not path.is_relative_to(root):
        raise ConfigError("output path", "/".join(parts), f"a path inside {root} (names must not hold '..' or start with '/')")
    return path


def results_path(*parts: str) -> Path:
    """`results/parts`, refused when a name would lead outside `results/`."""
    return inside(results_dir(), *parts)


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI if set, else the embedded sqlite store `results/mlflow.db` (always absolute:
    a relative sqlite URI would follow the working directory, which Ray Tune changes per trial)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{results_dir() / 'mlflow.db'}"


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
