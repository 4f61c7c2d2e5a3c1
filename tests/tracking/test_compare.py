"""Two experiments side by side (issue 47, item 13): paired by configuration, the change named, B - A with Welch's
interval, and the same through the command."""

import io

import numpy as np
import pytest
from rich.console import Console

import fedbench
from fedbench.cli import main
from fedbench.core.errors import ConfigError
from fedbench.tracking.reproduction.verdict import half_width
from tests.conftest import TINY

TASK = {
    **{k: v for k, v in TINY.items() if k != "task"},
    "name": "variants",
    "seeds": [0, 1, 2],
    "grid": {"algorithm": ["fedavg", "local"]},
}


def finals(results, algorithm):
    return np.array([r.final["final.acc_local_mean"] for r in results if r.spec.algorithm.name == algorithm])


def test_two_set_variants_of_one_experiment_are_paired_by_configuration_with_the_change_named(mlflow_store, capsys):
    quiet = Console(file=io.StringIO())
    before = fedbench.run(TASK, console=quiet)
    after = fedbench.run(TASK, console=quiet, optimizer__lr=0.2)
    board = fedbench.compare("variants", "variants", a_where=["optimizer.lr=0.05"], b_where=["optimizer.lr=0.2"])
    assert board.change == ["optimizer.lr: 0.05 -> 0.2"]
    assert list(board.table["configuration"]) == ["fedavg", "local"]
    fedavg = board.table.set_index("configuration").loc["fedavg"]
    a, b = finals(before, "fedavg"), finals(after, "fedavg")
    assert fedavg["A n"] == fedavg["B n"] == 3
    assert fedavg["B - A"] == pytest.approx(b.mean() - a.mean())
    half = half_width([(a.var(ddof=1) / 3, 2), (b.var(ddof=1) / 3, 2)])
    assert fedavg["95% interval"] == f"[{b.mean() - a.mean() - half:+.4f}, {b.mean() - a.mean() + half:+.4f}]"
    tied = b.mean() - a.mean() - half <= 0 <= b.mean() - a.mean() + half
    assert fedavg["verdict"] == ("≈ tied" if tied else ("B better" if b.mean() > a.mean() else "B worse"))

    assert (
        main(["compare", "variants", "variants", "--a-where", "optimizer.lr=0.05", "--b-where", "optimizer.lr=0.2"])
        == 0
    )
    printed = capsys.readouterr().out
    assert "B differs from A in: optimizer.lr: 0.05 -> 0.2" in printed and fedavg["verdict"] in printed


def test_a_side_that_holds_nothing_or_a_field_it_lacks_is_refused_by_name(mlflow_store, capsys):
    fedbench.run({**TASK, "seeds": [0]}, console=Console(file=io.StringIO()))
    with pytest.raises(ConfigError, match="an experiment with finished runs"):
        fedbench.compare("variants", "variants", b_where=["optimizer.lr=9"])
    with pytest.raises(ConfigError, match="a field the runs of variants"):
        fedbench.compare("variants", "variants", a_where=["optimiser.lr=0.05"])
    assert main(["compare", "variants", "nothing@/nonexistent/results"]) == 2
    assert "error:" in capsys.readouterr().out
