"""Commands that only read or plan import nothing heavy they do not use, so that they answer at once.

Each command runs in a fresh interpreter; the test names the heavy packages it left in `sys.modules`. No
times are taken: an import that creeps back onto one of these paths fails here whatever the machine.
"""

import json
import os
import subprocess
import sys

import pytest

HEAVY = ("torch", "sklearn", "scipy", "pandas", "mlflow", "matplotlib", "optuna", "ray", "ray.tune")

PROBE = """
import json, sys
from fedbench.cli import main
try:
    main(sys.argv[2:])
except SystemExit:  # --help
    pass
print(json.dumps(sorted(set(sys.modules) & set(json.loads(sys.argv[1])))), file=sys.stderr)
"""


def heavy_imports(*argv: str) -> set[str]:
    """The HEAVY modules a fresh process had imported once `fedbench ARGV` returned."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(HEAVY), *argv], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def test_help_imports_nothing_heavy():
    assert heavy_imports("--help") == set()
    assert heavy_imports("sweep", "--help") == set()


def test_list_reads_the_cached_catalog_without_importing_what_it_lists():
    heavy_imports("list")  # the first `list` after an edit builds the catalog: it imports every registered module
    assert heavy_imports("list") == set()
    assert heavy_imports("list", "algorithms") == set()
    assert heavy_imports("list", "algorithms", "feroma") == set()


@pytest.mark.parametrize(
    "argv",
    [
        ("sweep", "tasks/feroma_drift.yaml", "--profile", "reduced", "--dry-run"),
        ("run", "tasks/quickstart.yaml", "--dry-run"),
    ],
)
def test_a_dry_run_imports_torch_for_the_configs_and_nothing_else_heavy(argv):
    """Expanding and hashing the specs needs the algorithms' Config classes, hence torch; not scikit-learn (the
    digits loader), pandas, MLflow, Ray, Tune or Optuna."""
    assert heavy_imports(*argv) == {"torch"}


def test_the_driver_of_a_plain_run_imports_neither_tune_optuna_matplotlib_nor_sklearn():
    """What `fedbench run` imports before the first run (the ray backend's pool included); the dataset's own
    loader may import more (digits: scikit-learn), and a plain run tracks to MLflow."""
    code = (
        "import json, sys; import fedbench.cli, fedbench.runtime.session, fedbench.runtime.ray_pool, "
        "fedbench.tracking.run_callbacks, fedbench.tracking.leaderboard, fedbench.tracking.console; "
        "print(json.dumps(sorted(m for m in ('ray.tune', 'optuna', 'matplotlib', 'sklearn') if m in sys.modules)))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


NEW_MODULES = """
import json, sys
import fedbench.api, fedbench.runtime.session, fedbench.tracking.run_callbacks  # where api.run starts Ray from
import ray
from fedbench.runtime.ray_pool import ensure_ray
before = set(sys.modules)
if sys.argv[1] == "ray":
    ensure_ray(num_cpus=1)
    ray.shutdown()
else:
    for module in json.loads(sys.argv[1]):
        __import__(module)
print(json.dumps(sorted(set(sys.modules) - before)), file=sys.stderr)
"""


def modules_imported_by(what: str) -> set[str]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run(
        [sys.executable, "-c", NEW_MODULES, what], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


@pytest.mark.slow
def test_ray_start_and_the_prefetched_tracking_imports_share_only_what_is_imported_before_the_thread():
    """The session imports MLflow's client in a thread while Ray starts (`imported_beside`): the modules both would
    import are imported first (`RAY_START_SHARES`), so that no module is ever imported by both threads at once."""
    from fedbench.runtime.session import RAY_START_SHARES
    from fedbench.tracking.run_callbacks import TRACKING_IMPORTS

    by_ray = modules_imported_by("ray")
    by_tracking = modules_imported_by(json.dumps(TRACKING_IMPORTS))
    shared = {m.split(".")[0] for m in by_ray & by_tracking}
    assert by_ray and by_tracking and shared <= set(RAY_START_SHARES)
