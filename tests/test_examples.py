"""Every script in examples/ runs as a user runs it (from the repository root, in its own process) and prints
what it promises."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "examples").glob("*.py"))

EXPECTED = {
    "compare_fedavg_fedprox.py": [r"4 of 4 runs finished", r"^ *\d +fedprox mu=0\.1 .* 2$", r"^ *\d +fedavg .* 2$"],
    "my_dataset.py": [r"^moons: 1500 train \+ 500 test points of 2 features, 2 classes$"],
    "my_model.py": [r"^residual_mlp: \d+ parameters, output \(5, 2\) for 5 points$"],
    "my_dataset_and_model.py": [r"2 of 2 runs finished", r"^ *\d +fedavg .* 1$", r"^ *\d +local .* 1$"],
    "my_algorithm.py": [
        r"2 of 2 runs finished",
        r"^ *\d +fedavg .* 1$",
        r"^ *\d +examples\.my_algorithm:ServerLrFedAvg server_lr=0\.5 .* 1$",
    ],
}
"""Per script, patterns that must each match a line of its output; a new example adds its own."""


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_example_runs_and_prints_what_it_promises(script, isolated_results, mlflow_store):
    assert script in EXPECTED, f"examples/{script} needs its expected output lines in EXPECTED"
    env = {
        **os.environ,
        "FEDBENCH_RESULTS": str(isolated_results),
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run(
        [sys.executable, f"examples/{script}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for pattern in EXPECTED[script]:
        assert any(re.search(pattern, line) for line in lines), f"no line matches {pattern!r} in:\n{proc.stdout}"
