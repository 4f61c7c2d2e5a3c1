"""Every method's metrics as one hash per method: run it before and after a refactor to show no number moved.

Two runs of each registered method on the serial backend, each hashed over its whole per-round history (every
metric but the timings `time_*`: accuracies, losses, the four byte channels, test-time and system accuracy, the
methods' round metrics) and its status:
- `contract`: the contract test's spec (tests/algorithms/test_contract.py), 2 rounds;
- `drift`: 3 rounds, drift every round, 3 of 4 clients sampled (CFL, which compares all of a cluster's clients,
  all 4), only the sampled clients evaluated before the last round.
Prints a line per method and variant, then one hash per variant over all methods.

    python bench/metrics_hash.py > before.txt; (change the code); python bench/metrics_hash.py | diff before.txt -
"""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/ holds the contract test's specs

from fedbench.core.registry import ALGORITHMS  # noqa: E402
from fedbench.runtime import run_spec  # noqa: E402
from tests.algorithms.test_contract import CHANGES  # noqa: E402
from tests.conftest import tiny_spec  # noqa: E402

DRIFT = {"partition": "dirichlet", "alpha": 0.5, "num_clients": 4, "drift_every": 1}


def contract(name: str):
    return tiny_spec(**{"algorithm": name, "rounds": 2, **CHANGES.get(name, {})})


def drift(name: str):
    change = CHANGES.get(name, {})
    algorithm = {**change.get("algorithm", {"name": name}), "client_fraction": 1.0 if name == "cfl" else 0.75}
    return tiny_spec(**{**change, "rounds": 3, "eval_clients": "sampled", "algorithm": algorithm, "scenario": DRIFT})


def digest(result) -> str:
    history = [{k: v for k, v in sorted(record.items()) if not k.startswith("time_")} for record in result.history]
    return hashlib.sha256(json.dumps([result.status, result.reason, history], sort_keys=True).encode()).hexdigest()[:16]


def main() -> None:
    warnings.filterwarnings("ignore")  # methods' own warnings about the tiny spec (pFedMe's momentum, ...)
    for variant, spec_of in (("contract", contract), ("drift", drift)):
        hashes = {name: digest(run_spec(spec_of(name))) for name in ALGORITHMS.names()}
        for name, value in hashes.items():
            print(f"{variant} {name} {value}", flush=True)
        print(f"{variant} ALL {hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()[:16]}")


if __name__ == "__main__":
    main()
