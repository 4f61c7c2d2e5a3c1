"""fedbench: benchmark federated-learning algorithms under distribution shift and drift.

From Python, as in a notebook:

    import fedbench
    results = fedbench.run("tasks/quickstart.yaml", rounds=3, seeds=[0])
    fedbench.leaderboard("tasks/quickstart.yaml")
    fedbench.report("tasks/feroma_drift.yaml", profile="smoke")   # beside the published numbers

`run`, `sweep`, `leaderboard`, `compare`, `export`, `bundle`, `unbundle`, `plot`, `report`, `ui`, `listing` and
`show_scenario` (see `fedbench.api`, which every `fedbench` command calls) are imported on first use, so `import
fedbench` loads neither torch, Ray nor MLflow.
"""

from __future__ import annotations

from fedbench.core.lazy import lazy_exports

__all__ = [
    "bundle",
    "compare",
    "export",
    "leaderboard",
    "listing",
    "plot",
    "report",
    "run",
    "show_scenario",
    "sweep",
    "ui",
    "unbundle",
]
__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "fedbench.api"))
