"""Before a big sweep, its cost (issue 47, item 12): what the store already holds finished, and the client compute
of the rest, read off the store's runs of each configuration or timed by a one-round probe."""

import io
import math
import statistics

import pytest
from rich.console import Console

import fedbench
from fedbench.api import dry_run_cost, plan_run
from fedbench.cli import main
from fedbench.core import metrics as M
from tests.conftest import TINY

TASK = {**{k: v for k, v in TINY.items() if k != "task"}, "name": "costed", "seeds": [0, 1]}


def test_the_store_says_what_is_finished_and_what_the_rest_costs(mlflow_store):
    ran = fedbench.run(TASK, console=Console(file=io.StringIO()))
    per_round = statistics.median(r.final[M.TOTAL_PREFIX + M.TIME_CLIENT_COMPUTE_S] / r.spec.rounds for r in ran)
    more = plan_run(TASK, seeds=[0, 1, 2], rounds=6).expand() + plan_run(TASK, seeds=[0, 1, 2]).expand()
    cost = dry_run_cost(more)
    assert cost.finished == 2 and cost.measured == 4 and not cost.unmeasured  # 3 at 6 rounds and seed 2 at 2
    cpus = more[0].resources.client_cpus
    assert cost.cpu_s == pytest.approx(per_round * (3 * 6 + 2) * cpus)
    assert cost.gpu_s == 0.0


def test_a_configuration_the_store_never_ran_is_named_and_a_probe_times_it(mlflow_store, capsys, tmp_path):
    import yaml

    other = plan_run(TASK, optimizer__lr=0.02).expand()
    cost = dry_run_cost(other)
    assert cost.measured == 0 and len(cost.unmeasured) == 2 and cost.cpu_s == 0.0
    assert "were never run in this store" in cost.lines("store")[-1]
    probed = dry_run_cost(other, probe=True)  # seeds share a configuration: one probe
    assert probed.measured == probed.probed == 2 and probed.cpu_s > 0 and not math.isnan(probed.cpu_s)

    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(TASK))
    assert main(["run", str(path), "--dry-run"]) == 0
    assert "0 of 2 runs finished already" in " ".join(capsys.readouterr().out.split())
    assert main(["run", str(path), "--probe"]) == 2  # only with --dry-run
    assert "--probe" in capsys.readouterr().out
