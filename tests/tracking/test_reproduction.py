"""Reproduction reports from real runs: cells equal the stored runs' mean ± std and n, beside the published
value and the difference; missing, failed and unpublished cells say so; PNGs are drawn and, with a sweep
parent run, logged on it."""

import numpy as np
import pytest
import yaml
from mlflow.tracking import MlflowClient
from PIL import Image

from fedbench.cli import main
from fedbench.config import load_task
from fedbench.runtime.session import run_specs
from fedbench.runtime.worker import numerics
from fedbench.tracking.mlflow_callback import MlflowCallback
from fedbench.tracking.paths import tracking_uri
from fedbench.tracking.reproduction import write_report
from fedbench.tracking.reproduction.cells import Cell
from fedbench.tracking.reproduction.markdown import MARKS, interval_text
from fedbench.tracking.reproduction.verdict import compare
from fedbench.tracking.sweep_runs import SweepRuns
from tests.conftest import TINY, tiny_spec

REFERENCE = [
    {
        "title": "Local accuracy",
        "source": "test Table 1, p. 1",
        "metric": "final.acc_local_mean",
        "scale": 100,
        "rows": ["algorithm"],
        "columns": ["optimizer.lr"],
        "cells": [
            {"algorithm": "fedavg", "optimizer.lr": 0.05, "value": 90.0},
            {"algorithm": "local", "optimizer.lr": 0.05, "value": None, "note": "the paper has no local row"},
            {"algorithm": "fedavg", "optimizer.lr": 1.0e30, "value": 50.0},
            {"algorithm": "local", "optimizer.lr": 1.0e30, "value": 80.0},
        ],
    }
]


def write_task(tmp_path, name, reference=REFERENCE, **fields):
    body = {k: v for k, v in TINY.items() if k != "task"}
    body.update(
        {
            "name": name,
            "rounds": 1,
            "model": {"name": "mlp", "hidden": [16]},
            "grid": {"algorithm": ["fedavg", "local"], "optimizer.lr": [0.05, 1.0e30]},
            "seeds": [0, 1],
            "reference": reference,
            **fields,
        }
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def run(specs):
    return run_specs(specs, lambda i, spec: [MlflowCallback()])


def stored(name, algorithm, lr):
    """Ours for a cell, straight from MLflow: the finished runs' final accuracy x 100."""
    client = MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name(name).experiment_id
    runs = client.search_runs(
        [experiment],
        f"params.`algorithm.name` = '{algorithm}' and params.`optimizer.lr` = '{lr}' "
        "and attributes.status = 'FINISHED'",
    )
    return np.array([r.data.metrics["final.acc_local_mean"] * 100 for r in runs])


def mark(kind: str) -> str:
    return f" {MARKS[kind]}" if kind in MARKS else ""


def row(markdown, name):
    [line] = [line for line in markdown.splitlines() if line.startswith(f"| {name} |")]
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_report_cells_hold_the_stored_runs_beside_the_published_values(tmp_path, mlflow_store, capsys):
    path = write_task(tmp_path, "repro")
    task = load_task(path)
    specs = [s for s in task.expand() if not (s.algorithm.name == "local" and s.optimizer.lr > 1)]
    assert len(specs) == 6  # local at lr 1e30 is left unrun
    results = run(specs)
    assert sorted(r.status for r in results) == ["FAILED"] * 2 + ["FINISHED"] * 4

    assert main(["report", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "1 compared" in printed and "1 no run yet" in printed and "1 failed" in printed and "not attached" in printed
    out = tmp_path / "results" / "reports" / "repro"
    markdown = (out / "report.md").read_text()

    fedavg, local = row(markdown, "fedavg"), row(markdown, "local")
    ours = stored("repro", "fedavg", 0.05)
    assert len(ours) == 2
    mean, std = ours.mean(), ours.std(ddof=1)
    assert fedavg[1].startswith(f"{mean:.1f} ± {std:.1f} (n=2) vs 90.0: {mean - 90:+.1f}")
    verdict = compare(list(ours), 90.0, None, None, tolerance=2.0, resolution=10.0)  # the defaults x scale 100
    assert fedavg[1].endswith(f"{interval_text(Cell(('fedavg',), (0.05,), 90.0), verdict)}{mark(verdict.kind)}")
    assert fedavg[2].startswith("failed (ClientDivergedError") and fedavg[2].endswith("vs 50.0")
    mine = stored("repro", "local", 0.05)
    assert local[1] == f"{mine.mean():.1f} ± {mine.std(ddof=1):.1f} (n=2) vs –"
    assert local[2] == "no run yet vs 80.0"
    assert "- local @ 0.05: the paper has no local row" in markdown
    assert markdown.count("ClientDivergedError") >= 3  # the cell and both seeds under "Failed runs"
    assert "Ours only" not in markdown  # every run is covered by a cell
    assert f"Clients computed with: {numerics('cpu')} (6 runs)." in markdown  # what one number per RunSpec needs

    pngs = sorted(out.glob("*.png"))
    assert [p.name for p in pngs] == ["table1_local_accuracy_lines.png", "table1_local_accuracy_vs_published.png"]
    for png in pngs:  # drawn, not blank
        pixels = np.asarray(Image.open(png).convert("L"))
        assert pixels.shape[0] > 300 and pixels.shape[1] > 400 and pixels.std() > 10


def test_runs_no_cell_covers_get_a_table_of_ours_only(tmp_path, mlflow_store):
    path = write_task(tmp_path, "bare", reference=None, grid={"algorithm": ["fedavg", "local"]}, seeds=[0])
    task = load_task(path)
    run(task.expand())
    report = write_report(task, tracking_uri(), tmp_path / "out")
    markdown = report.path.read_text()
    assert "## Ours only" in markdown and "vs" not in row(markdown, "fedavg")[1]
    for algorithm in ("fedavg", "local"):
        [value] = stored("bare", algorithm, 0.05) / 100  # no reference: on the metric's own scale
        assert row(markdown, algorithm)[1] == f"{value:.3f} ± 0.000 (n=1)"
    assert report.summary()["compared"] == 0 and report.parent_run_id is None


def test_the_report_is_logged_on_the_experiments_latest_sweep_parent(tmp_path, mlflow_store):
    path = write_task(
        tmp_path,
        "swept",
        grid={"algorithm": ["fedavg"]},
        seeds=[0],
        reference=[
            {
                **REFERENCE[0],
                "columns": ["scenario.num_clients"],
                "cells": [{"algorithm": "fedavg", "scenario.num_clients": 4, "value": 90.0}],
            }
        ],
    )
    task = load_task(path)
    run(task.expand())
    parent = SweepRuns(tracking_uri(), "swept").start_parent("swept-grid", 1).run_id
    report = write_report(task, tracking_uri(), tmp_path / "out")
    assert report.parent_run_id == parent
    assert f"attached to sweep parent run `{parent}`" in report.path.read_text()
    logged = {a.path for a in MlflowClient(tracking_uri()).list_artifacts(parent, "report")}
    assert logged == {f"report/{p.name}" for p in [report.path, *report.files]}
    assert "report/report.md" in logged and any(p.endswith("_vs_published.png") for p in logged)


def test_report_cli_leaves_the_default_tolerance_to_the_report_and_states_its_value():
    """`--tolerance` defaults to None, so DEFAULT_TOLERANCE alone decides; the help says what that value is."""
    from fedbench.cli import build_parser
    from fedbench.tracking.reproduction import DEFAULT_TOLERANCE

    report = next(
        a for a in build_parser()._subparsers._group_actions[0].choices["report"]._actions if a.dest == "tolerance"
    )
    assert report.default is None
    assert f"default {DEFAULT_TOLERANCE}:" in report.help


def test_a_negative_tolerance_is_refused(tmp_path):
    from fedbench.core.errors import ConfigError

    task = load_task(write_task(tmp_path, "tol"))
    with pytest.raises(ConfigError, match="--tolerance"):
        write_report(task, tracking_uri(), tmp_path / "out", tolerance=-1)


def test_cells_the_task_cannot_fill_or_cannot_tell_apart_say_so_before_anything_runs(tmp_path):
    reference = [
        {
            **REFERENCE[0],
            "cells": [
                {"algorithm": "fedavg", "optimizer.lr": 0.5, "value": 70.0},  # the task has no such run
                {"algorithm": "fedavg", "optimizer.lr": 0.05, "value": 90.0},  # two fedavg configurations match
            ],
        }
    ]
    path = write_task(
        tmp_path,
        "unrun",
        reference=reference,
        grid={"algorithm": ["fedavg", {"name": "fedavg", "client_fraction": 0.5}], "optimizer.lr": [0.05]},
    )
    report = write_report(load_task(path), tracking_uri(), tmp_path / "out")  # no store yet: nothing is created
    cells = row(report.path.read_text(), "fedavg")
    assert cells[1:3] == ["ambiguous: 2 configurations match (name more fields) vs 90.0", "not in this task vs 70.0"]
    assert report.files == [] and not (tmp_path / "results" / "mlflow.db").exists()
    assert report.summary() == {
        "compared": 0,
        "within": 0,
        "beyond": 0,
        "not testable": 0,
        "no run yet": 0,
        "failed": 0,
        "not in this task": 1,
        "ours only": 0,
    }


def test_the_python_api_writes_the_profiles_report_as_the_command_does(tmp_path, mlflow_store):
    """`fedbench.report(task, profile=...)` reads the profile's own experiment and writes where it is told."""
    import fedbench

    path = write_task(tmp_path, "repro_api", profiles={"smoke": {"seeds": [0], "grid.optimizer.lr": [0.05]}})
    results = fedbench.run(str(path), profile="smoke")
    assert [r.spec.algorithm.name for r in results] == ["fedavg", "local"]

    report = fedbench.report(str(path), profile="smoke", out=tmp_path / "api_report")
    assert report.path == tmp_path / "api_report" / "report.md"
    assert report.summary()["compared"] == 1  # fedavg at lr 0.05; lr 1e30 is not in the smoke profile
    assert row(report.path.read_text(), "fedavg")[1].startswith(
        f"{stored('repro_api-smoke', 'fedavg', 0.05)[0]:.1f} ± 0.0 (n=1)"
    )


def test_numeric_columns_follow_the_grids_direction_with_reference_only_values_in_place():
    """001's K columns read 2, 3, 5, 10 when the grid runs 2 and 5 and only reference cells name 3 and 10;
    002's drift columns read 4, 2, 1 as the grid (and the paper) lists them; names keep the grid's order."""
    from fedbench.tracking.reproduction.cells import value_order

    grid_then_cells = [
        {"k": 2, "drift": 4, "preset": "b"},
        {"k": 5, "drift": 2, "preset": "a"},
        {"k": 10, "drift": 1},
        {"k": 3},
    ]
    order = value_order(grid_then_cells)
    assert order["k"] == ["2.0", "3.0", "5.0", "10.0"]
    assert order["drift"] == ["4.0", "2.0", "1.0"]
    assert order["preset"] == ["b", "a"]


def test_a_smaller_profiles_report_keeps_the_rows_and_columns_it_runs_and_names_the_tables_it_leaves_out(
    tmp_path, mlflow_store
):
    unrun = {
        **REFERENCE[0],
        "title": "Diverging only",
        "cells": [{"algorithm": "fedavg", "optimizer.lr": 1.0e30, "value": 50.0}],
    }
    path = write_task(
        tmp_path, "part", reference=[REFERENCE[0], unrun], profiles={"small": {"grid.optimizer.lr": [0.05]}}
    )

    paper = write_report(load_task(path), tracking_uri(), tmp_path / "paper", log_artifacts=False)
    assert [len(t.column_keys) for t in paper.tables] == [2, 1]

    small = write_report(load_task(path, ["profile=small"]), tracking_uri(), tmp_path / "small", log_artifacts=False)
    [table] = small.tables
    assert table.column_keys == [(0.05,)] and table.left_out_columns == 1
    # the paper's cells it leaves out are counted, not dropped: the unrun table's one cell and the 1e30 column's two
    assert small.not_run == ["Diverging only"] and small.summary()["not in profile small"] == 3
    markdown = small.path.read_text()
    assert "Tables it runs no cell of, left out: Diverging only." in markdown
    assert "1 more columns of the paper's table are not in this profile" in markdown
    assert row(markdown, "fedavg")[1] == "no run yet vs 90.0" and len(row(markdown, "fedavg")) == 2 + 5  # + costs


@pytest.mark.parametrize(
    "columns, keys, axis",
    [
        (("dataset.name", "scenario.clusters"), [("mnist", 2), ("mnist", 5), ("fmnist", 2), ("fmnist", 5)], 1),
        # the clients only follow K here (one sparsity): every panel would hold a single point, so no line figure
        (
            ("dataset.name", "scenario.clusters", "scenario.num_clients"),
            [("mnist", 2, 40), ("mnist", 5, 100), ("fmnist", 2, 40), ("fmnist", 5, 100)],
            None,
        ),
        (("scenario.preset", "scenario.drift_every"), [("low", 4), ("low", 2), ("low", 1), ("high", 4)], 1),
        (("algorithm.name",), [("fedavg",), ("local",)], None),
    ],
)
def test_a_line_figure_runs_along_the_numeric_column_whose_panels_hold_most_points(columns, keys, axis):
    from fedbench.config.reference import ReferenceTable
    from fedbench.tracking.reproduction.cells import TableResult
    from fedbench.tracking.reproduction.figures import numeric_axis

    table = ReferenceTable("t", "s", "final.acc_local_mean", 1.0, ("algorithm.name",), columns, ())
    assert numeric_axis(TableResult(table, [("fedavg",)], keys, {}, {}, {})) == axis


def test_a_profile_that_runs_none_of_the_papers_cells_says_so_before_and_after_its_runs(tmp_path, mlflow_store, capsys):
    """`report --profile smoke` said `8 no run yet` before the sweep and `0 compared ... 0 not in this task` after
    it: its own runs were counted as the paper's cells, and the paper's cells vanished (issue 31)."""
    path = write_task(
        tmp_path,
        "elsewhere",
        grid={"algorithm": ["fedavg", "local"], "optimizer.lr": [0.05]},
        profiles={"smoke": {"grid.optimizer.lr": [0.02]}},
    )  # the paper's cells are all at 0.05 or 1e30
    for ran in (False, True):
        if ran:
            run(load_task(path, ["profile=smoke"]).expand())
        assert main(["report", str(path), "--profile", "smoke"]) == 0
        printed = " ".join(capsys.readouterr().out.split())
        ours = "2 ours only" if ran else "0 no run yet"
        assert "0 compared" in printed and "4 not in profile smoke" in printed and ours in printed, printed
        assert (
            "nothing can be compared: optimizer.lr is 0.05, 1e+30 in the paper's cells, 0.02 in these runs" in printed
        )


def test_an_ours_only_table_names_the_fields_that_tell_its_runs_apart_and_no_others():
    """feddrm_lambda's smoke profile labelled its columns `digits, feddrm/dir0.3, dirichlet, 0.3, 100, 10, None`:
    one dataset and the fields each preset fixes, beside the preset (issue 31)."""
    from fedbench.tracking.mlflow_store import MlflowStore
    from fedbench.tracking.reproduction.report import build_tables, stored_runs
    from fedbench.tracking.reproduction.tables import telling_columns

    task = load_task("tasks/feddrm_lambda.yaml", ["profile=smoke"])
    specs = task.expand()
    nowhere = MlflowStore("sqlite:///nowhere.db")
    ours = [t for t in build_tables(task, specs, stored_runs(nowhere, "nothing_here")) if t.ours_only]
    assert {t.reference.columns for t in ours} == {("scenario.preset",)}
    assert {c for t in ours for c in t.column_keys} == {("feddrm/dir0.3",), ("feddrm/spc",)}
    flats = [{"a": 1, "b": "x", "c": 1}, {"a": 2, "b": "y", "c": 1}, {"a": 2, "b": "z", "c": 1}]
    assert telling_columns(["c", "a", "b"], flats) == ("a", "b")  # c never varies; b splits a's second value
    assert telling_columns(["b", "a"], flats) == ("b",)  # b fixes a


def test_a_test_time_tables_rows_say_how_their_test_clients_got_a_model(tmp_path, mlflow_store):
    """002 scores its baselines under the known association and FEROMA under its own profile match: a report
    on a test-time metric says, per row, which protocol its runs used."""
    from fedbench.tracking.reproduction.tables import test_time_protocol

    assert test_time_protocol(tiny_spec(algorithm="ifca", test_time="known")) == "known association (002 App. E)"
    assert test_time_protocol(tiny_spec(algorithm="feroma", test_time="known")) == "own match"
    assert test_time_protocol(tiny_spec(algorithm="ifca")) == "own rule (ensemble or global model)"
    assert test_time_protocol(tiny_spec(algorithm="local", test_time="known")) == "none (no test-time clients)"
    index_reading = test_time_protocol(tiny_spec(algorithm="ifca", test_time="known"), "acc_test_time_index")
    assert index_reading == "same-index client (002's baseline code)"  # a known run's same-index reading
    reference = [
        {
            **REFERENCE[0],
            "metric": "final.acc_test_time",
            "cells": [
                {"algorithm": "fedavg", "optimizer.lr": 0.05, "value": 90.0},
                {"algorithm": "oracle", "optimizer.lr": 0.05, "value": 95.0},
            ],
        }
    ]
    path = write_task(
        tmp_path, "tt", reference=reference, grid={"algorithm": ["fedavg", "oracle"]}, seeds=[0], test_time="known"
    )
    task = load_task(path)
    run(task.expand())
    markdown = write_report(task, tracking_uri(), tmp_path / "out").path.read_text()
    assert any(line.startswith("| algorithm.name |") and "test-time model" in line for line in markdown.splitlines())
    assert row(markdown, "fedavg")[2] == "known association (002 App. E)" and row(markdown, "oracle")[2] == "own match"
    assert "Test-time model: how the row's test-time clients got a model" in markdown


def test_the_verdict_is_welchs_interval_for_a_difference_of_means():
    """The interval matches scipy's Welch t-test on samples with the paper's mean, std and n; the verdict compares
    means: beyond where the whole interval clears the tolerance, not testable where it is wider than the
    resolution, within otherwise."""
    from scipy import stats

    from fedbench.tracking.reproduction.verdict import BEYOND, NOT_TESTABLE, WITHIN, compare

    ours, paper = [97.1, 98.4, 98.9], np.array([95.0, 97.5, 98.0, 99.5, 100.0])
    verdict = compare(ours, float(paper.mean()), float(paper.std(ddof=1)), 5, tolerance=2.0, resolution=10.0)
    low, high = stats.ttest_ind(ours, paper, equal_var=False).confidence_interval(0.95)
    assert verdict.interval == pytest.approx((low, high))
    assert verdict.kind == WITHIN
    # 002 Table 14's FedAvg, medium, drift every 2 (82.8 +- 9.4 over 5 seeds) against the committed seeds 42-44:
    # the old rule (2 x the combined std of single draws) said "within" for anything in [29, 100]; the means'
    # interval is about +-57 points wide, so nothing is tested.
    assert compare([87.8, 88.7, 46.6], 82.8, 9.4, 5, 2.0, 10.0).kind == NOT_TESTABLE
    assert compare([80.0, 81.0, 80.5], 90.0, 1.0, 5, 2.0, 10.0).kind == BEYOND
    assert compare([88.5, 89.0, 89.5], 90.0, 1.0, 5, 2.0, 10.0).kind == WITHIN  # -1.0 [-2.3, 0.3]: inside
    # One seed: ours' spread is taken to be the paper's; with no spread known at all, nothing can be tested.
    single = compare([85.0], 90.0, 3.0, 5, 2.0, 10.0)
    assert single.assumed_spread and single.half_width == pytest.approx(stats.t.ppf(0.975, 4) * np.sqrt(9 + 9 / 5))
    assert compare([85.0], 90.0, None, None, 2.0, 10.0).kind == NOT_TESTABLE
    assert compare([85.0, 85.0], 90.0, None, None, 2.0, 10.0).kind == BEYOND  # no spread on either side: exact


def test_a_report_flags_rows_and_columns_whose_differences_all_have_one_sign():
    from fedbench.tracking.reproduction.verdict import one_sign_patterns

    found = one_sign_patterns(
        {
            ("column", "2"): [-8.0, -29.0, -20.0, -9.0, -22.0, -15.0],  # six below: p = 2 / 64
            ("row", "fedavg"): [9.7, -8.5, -14.0],  # mixed
            ("row", "ifca"): [59.7, 64.6],  # too few cells to say
        }
    )
    assert [(p.axis, p.key, p.sign, p.count) for p in found] == [("column", "2", -1, 6)]
    assert found[0].p_value == pytest.approx(2 / 64)


def test_a_cell_reads_its_interval_and_its_verdicts_mark():
    from fedbench.tracking.reproduction.cells import Cell
    from fedbench.tracking.reproduction.markdown import cell_text, how_to_read

    base = dict(row=("fedavg",), column=(2,), published=90.0, published_std=1.0, published_seeds=5, specs=3)
    assert cell_text(Cell(**base, values=(80.0, 81.0, 80.5)), 2.0, 10.0).endswith(
        "-9.5 [-10.8, -8.2] ⚠"
    )  # se 0.53 on 6.0 df
    assert cell_text(Cell(**base, values=(40.0, 90.0, 100.0)), 2.0, 10.0).endswith("?")
    assert cell_text(Cell(**base, values=(89.0, 89.5, 90.0)), 2.0, 10.0).endswith("]")
    assert "Welch" in how_to_read(0.02, 0.1) and "not testable" in how_to_read(0.02, 0.1)


def test_a_published_std_without_the_number_of_seeds_is_refused():
    from fedbench.config.reference import parse_reference
    from fedbench.core.errors import ConfigError

    table = {**REFERENCE[0], "cells": [{"algorithm": "fedavg", "optimizer.lr": 0.05, "value": 90.0, "std": 1.0}]}
    with pytest.raises(ConfigError, match=r"reference\[0\]\.seeds.*cells\[0\] gives a std"):
        parse_reference([table], None)
    assert parse_reference([{**table, "seeds": 5}], None)[0].cells[0].seeds == 5
