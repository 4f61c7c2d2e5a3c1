"""fedbench: benchmark federated-learning algorithms under distribution shift and drift.

From Python, as in a notebook:

    import fedbench
    results = fedbench.run("tasks/quickstart.yaml", rounds=3, seeds=[0])
    fedbench.leaderboard("tasks/quickstart.yaml")
    fedbench.report("tasks/feroma_drift.yaml", profile="smoke")   # beside the published numbers

`run`, `sweep`, `leaderboard` and `report` (see `fedbench.api`) are imported on first use, so `import fedbench` loads
neither torch, Ray nor MLflow.
"""

from __future__ import annotations

from typing import Any

__all__ = ["leaderboard", "report", "run", "sweep"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from fedbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'fedbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
