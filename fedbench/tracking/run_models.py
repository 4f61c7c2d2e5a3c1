"""A run's final models as MLflow PyTorch models (`RunSpec.log_models`): `models/model_<i>/` under the run's
artifacts, each loadable with `mlflow.pytorch.load_model(f"runs:/{run_id}/models/model_0")`, and
`models/clients.json` mapping each to the clients it is for. The modules are pickled (fedbench's model classes):
load them where fedbench is installed."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

FOLDER = "models"


def log_models(client: Any, run_id: str, models: list[tuple[Any, list[int]]]) -> list[str]:
    """Save each (torch module, clients) of `models` as an MLflow model and log it under the run; the paths."""
    if not models:
        return []
    import mlflow.pytorch  # torch's MLflow flavour: only for a run that asked for its models

    logged = []
    with tempfile.TemporaryDirectory() as folder:
        for i, (model, _) in enumerate(models):
            path = Path(folder) / f"model_{i}"
            # pickled, not traced (pt2): a conditional model's forward takes a client's statistics beside the input
            mlflow.pytorch.save_model(model.cpu().eval(), str(path), serialization_format="pickle")
            client.log_artifacts(run_id, str(path), f"{FOLDER}/model_{i}")
            logged.append(f"{FOLDER}/model_{i}")
        owners = {f"model_{i}": clients for i, (_, clients) in enumerate(models)}
        (Path(folder) / "clients.json").write_text(json.dumps(owners, indent=1))
        client.log_artifact(run_id, str(Path(folder) / "clients.json"), FOLDER)
    return logged
