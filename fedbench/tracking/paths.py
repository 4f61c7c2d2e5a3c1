"""Where results go: `results/` under the working directory unless FEDBENCH_RESULTS says otherwise."""

from __future__ import annotations

import os
from pathlib import Path


def results_dir() -> Path:
    path = Path(os.environ.get("FEDBENCH_RESULTS", "results")).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI if set, else the embedded sqlite store `results/mlflow.db` (always absolute:
    a relative sqlite URI would follow the working directory, which Ray Tune changes per trial)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{results_dir() / 'mlflow.db'}"
