"""Result plots read back from MLflow: curves and heatmap equal the logged values, PNGs logged under the sweep."""

import time

import numpy as np
import pandas as pd
import pytest
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient
from PIL import Image

from fedbench.cli import main
from fedbench.core.errors import ConfigError
from fedbench.runtime import run_spec
from fedbench.tracking.mlflow_callback import MlflowCallback, experiment_id_for
from fedbench.tracking.plots import plot_experiment
from fedbench.tracking.tags import SWEEP_TAG
from tests.conftest import tiny_spec

ALGORITHMS = ("fedavg", "local")
ALPHAS = ("0.3", "3.0")
SEEDS = (0, 1, 2)
ROUNDS = 3


def log_run(client, experiment, parent, params, history, status="FINISHED", reason=None):
    """A child run as MlflowCallback writes one: params, `acc_local_mean` with step = round, the final value."""
    run = client.create_run(experiment, tags={"mlflow.parentRunId": parent}).info.run_id
    now = int(time.time() * 1000)
    metrics = [Metric("acc_local_mean", v, now, step) for step, v in history.items()]
    metrics.append(Metric("final.acc_local_mean", list(history.values())[-1], now, len(history)))
    tags = [RunTag("failure_reason", reason)] if reason else []
    client.log_batch(run, metrics=metrics, params=[Param(k, str(v)) for k, v in params.items()], tags=tags)
    client.set_terminated(run, status)
    return run


@pytest.fixture
def handmade(mlflow_store):
    """Known histories: 2 algorithms x 2 alphas x 3 seeds under the newer of two sweep parents, plus a failed run
    whose outlying values would move the means if it were drawn. Seed 2 of (local, 0.3) misses round 2."""
    uri = f"sqlite:///{mlflow_store}"
    client = MlflowClient(uri)
    experiment = experiment_id_for(client, "plots_exact")
    now = int(time.time() * 1000)
    older = client.create_run(experiment, start_time=now - 3_600_000, tags={SWEEP_TAG: "plots_exact-old"}).info.run_id
    parent = client.create_run(experiment, start_time=now, tags={SWEEP_TAG: "plots_exact-new"}).info.run_id
    rng = np.random.default_rng(0)
    logged = {}
    for algorithm in ALGORITHMS:
        for alpha in ALPHAS:
            for seed in SEEDS:
                history = {r: float(rng.uniform(0.1, 0.9)) for r in range(1, ROUNDS + 1)}
                if (algorithm, alpha, seed) == ("local", "0.3", 2):
                    del history[2]
                params = {
                    "run_hash": f"{algorithm}{alpha}{seed}",
                    "algorithm.name": algorithm,
                    "scenario.alpha": alpha,
                    "seed": seed,
                    "dataset.name": "digits",
                }
                log_run(client, experiment, parent, params, history)
                logged[(algorithm, alpha, seed)] = history
    bad = {"run_hash": "bad", "algorithm.name": "fedavg", "scenario.alpha": "0.3", "seed": 9, "dataset.name": "digits"}
    log_run(client, experiment, parent, bad, {1: 50.0}, "FAILED", "ClientDivergedError: loss is nan")
    return uri, parent, older, logged


def test_curves_and_heatmap_equal_the_logged_values_and_land_under_the_latest_sweep(handmade, isolated_results):
    uri, parent, older, logged = handmade
    plots = plot_experiment("plots_exact", uri, isolated_results / "plots" / "plots_exact")

    assert len(plots.curves) == len(ALGORITHMS) * len(ALPHAS) * ROUNDS
    for row in plots.curves.to_dict("records"):
        algorithm = row["configuration"]
        alpha = row["group"].removeprefix("alpha=")  # figures name fields without their section
        values = [
            logged[(algorithm, alpha, s)][row["round"]] for s in SEEDS if row["round"] in logged[(algorithm, alpha, s)]
        ]
        assert row["n"] == len(values) == (2 if (algorithm, alpha, row["round"]) == ("local", "0.3", 2) else 3)
        assert row["mean"] == pytest.approx(np.mean(values)) and row["std"] == pytest.approx(np.std(values, ddof=1))

    assert plots.heatmap_metric == "final.acc_local_mean"
    assert plots.heatmap.shape == (len(ALGORITHMS), len(ALPHAS))
    for algorithm in ALGORITHMS:
        for alpha in ALPHAS:
            finals = [list(logged[(algorithm, alpha, s)].values())[-1] for s in SEEDS]
            assert plots.heatmap.loc[algorithm, f"alpha={alpha}"] == pytest.approx(np.mean(finals))

    assert len(plots.failed) == 1 and plots.failed["status"][0] == "FAILED"
    assert [p.name for p in plots.files] == ["curves_acc_local_mean.png", "heatmap_final_acc_local_mean.png"]
    for path in plots.files:
        with Image.open(path) as image:
            image.verify()
            assert image.format == "PNG" and min(image.size) > 100

    client = MlflowClient(uri)
    assert plots.parent_run_id == parent
    logged_names = sorted(a.path for a in client.list_artifacts(parent, "plots"))
    assert logged_names == [f"plots/{p.name}" for p in sorted(plots.files)]
    assert client.list_artifacts(older) == []


def test_unknown_experiment_metric_or_group_by_is_refused_naming_what_is_allowed(handmade):
    uri = handmade[0]
    with pytest.raises(ConfigError) as err:
        plot_experiment("no_such_experiment", uri, None)
    assert err.value.field == "--experiment"
    with pytest.raises(ConfigError) as err:
        plot_experiment("plots_exact", uri, None, metric="acc_nope")
    assert err.value.field == "--metric" and "acc_local_mean" in str(err.value)
    with pytest.raises(ConfigError) as err:
        plot_experiment("plots_exact", uri, None, group_by=["scenery"])
    assert err.value.field == "--group-by" and "scenario" in str(err.value)


def test_plot_cli_on_plain_runs_writes_files_and_says_there_is_no_sweep(mlflow_store, isolated_results, capsys):
    """Real runs logged by MlflowCallback (no sweep parent), one of them diverging."""
    uri = f"sqlite:///{mlflow_store}"
    specs = [tiny_spec(task="plots_cli", algorithm=a, seed=s) for a in ALGORITHMS for s in (0, 1)]
    specs.append(tiny_spec(task="plots_cli", algorithm="fedavg", seed=5, optimizer={"name": "sgd", "lr": 1e30}))
    for spec in specs:
        run_spec(spec, [MlflowCallback(uri)])

    assert main(["plot", "--experiment", "plots_cli"]) == 0
    out = capsys.readouterr().out
    assert "no sweep parent run" in out and "left out 1 run" in out and "ClientDivergedError" in out
    folder = isolated_results / "plots" / "plots_cli"
    # one scenario is one heatmap column: no heatmap (issue 31), the per-client figures beside the curves
    assert sorted(p.name for p in folder.iterdir()) == [
        "clients_by_round_acc_local.png",
        "clients_final_acc_local.png",
        "curves_acc_local_mean.png",
    ]

    plots = plot_experiment("plots_cli", uri, folder, log_artifacts=False)
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("plots_cli").experiment_id
    for algorithm in ALGORITHMS:
        runs = [
            r
            for r in client.search_runs([experiment])
            if r.data.params["algorithm.name"] == algorithm and r.info.status == "FINISHED"
        ]
        per_round = np.array(
            [
                [
                    m.value
                    for m in sorted(client.get_metric_history(r.info.run_id, "acc_local_mean"), key=lambda m: m.step)
                ]
                for r in runs
            ]
        )
        assert per_round.shape == (2, 2)
        curve = plots.curves[plots.curves["configuration"] == algorithm].sort_values("round")
        assert curve["mean"].to_numpy() == pytest.approx(per_round.mean(axis=0))
        assert curve["std"].to_numpy() == pytest.approx(per_round.std(axis=0, ddof=1))

    assert main(["plot", "--experiment", "plots_cli", "--metric", "acc_nope"]) == 2
    assert "--metric" in capsys.readouterr().out
    assert main(["plot"]) == 2


def test_paper_formats_dpi_and_intervals_in_heatmap_cells(handmade, isolated_results):
    uri, parent, older, logged = handmade
    folder = isolated_results / "paper"
    plots = plot_experiment("plots_exact", uri, folder, formats=("png", "pdf", "svg"), dpi=200, log_artifacts=False)
    assert sorted(p.suffix for p in plots.files) == [".pdf", ".pdf", ".png", ".png", ".svg", ".svg"]
    assert all(p.stat().st_size > 1000 for p in plots.files)
    heatmap_svg = (folder / "heatmap_final_acc_local_mean.svg").read_text()
    assert heatmap_svg.count("[") >= 2  # every cell shows its mean's interval over seeds
    with Image.open(folder / "curves_acc_local_mean.png") as image:
        assert image.info["dpi"][0] == pytest.approx(200, abs=1)


def test_bad_figure_options_are_refused(capsys):
    assert main(["plot", "--experiment", "x", "--format", "png,gif"]) == 2
    assert "--format: got 'png,gif'" in capsys.readouterr().out
    assert main(["plot", "--experiment", "x", "--dpi", "0"]) == 2


def test_seed_bands_stay_inside_the_metrics_range():
    """Two seeds of an accuracy near 0 gave a band reaching below 0 (issue 31)."""
    import pandas as pd
    from matplotlib.collections import PolyCollection

    from fedbench.core import metrics as M
    from fedbench.tracking.plots import draw_curves

    curves = pd.DataFrame(
        {
            "group": "all",
            "configuration": "fedavg",
            "round": [1, 2, 3],
            "mean": [0.05, 0.5, 0.97],
            "ci_low": [-0.4, 0.3, 0.5],  # two seeds' t intervals are wide
            "ci_high": [0.5, 0.7, 1.4],
        }
    )
    figure = draw_curves(curves, "t", "accuracy", M.value_range(M.ACC_LOCAL_MEAN))
    [band] = [c for c in figure.axes[0].collections if isinstance(c, PolyCollection)]
    ys = np.concatenate([path.vertices[:, 1] for path in band.get_paths()])
    assert ys.min() >= 0.0 and ys.max() <= 1.0
    assert M.value_range("final." + M.TRAIN_LOSS_MEAN) == (0.0, float("inf"))


def test_figures_name_sampled_values_as_tables_do():
    """A search's heatmap rows read `fedprox mu=0.018662266976517967`; figures cut them as tables do (issue 33)."""
    import pandas as pd

    from fedbench.tracking.plots import draw_curves, draw_heatmap

    names = ["fedprox mu=0.018662266976517967", "fedprox mu=0.4311005868549", "fedavg (reference)"]
    heatmap = pd.DataFrame({"all": [0.8, 0.7, 0.75]}, index=names)
    figure = draw_heatmap(heatmap, (heatmap * 0.9, heatmap * 1.1), "t", "all")
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == [
        "fedprox mu=0.0187",
        "fedprox mu=0.431",
        "fedavg (reference)",
    ]
    curves = pd.DataFrame(
        {"group": "all", "configuration": names, "round": 1, "mean": 0.5, "ci_low": np.nan, "ci_high": np.nan}
    )
    legend = [t.get_text() for t in draw_curves(curves, "t", "accuracy").legends[0].get_texts()]
    assert sorted(legend) == sorted(["fedprox mu=0.0187", "fedprox mu=0.431", "fedavg (reference)"])


def test_the_per_client_distribution_is_each_runs_last_evaluated_round():
    """Runs of different lengths (an early-stopped trial) each count with their own last round."""
    import pandas as pd

    from fedbench.tracking.client_plots import draw_client_distribution, draw_client_map, final_round_rows

    table = pd.DataFrame(
        {
            "run_hash": ["a"] * 4 + ["b"] * 2,
            "round": [1, 1, 2, 2, 1, 1],
            "client": [0, 1, 0, 1, 0, 1],
            "acc_local": [0.1, 0.2, 0.7, 0.9, 0.4, 0.5],
            "group": ["g"] * 6,
            "configuration": ["x"] * 4 + ["y"] * 2,
        }
    )
    final = final_round_rows(table)
    assert sorted(final["acc_local"]) == [0.4, 0.5, 0.7, 0.9]
    figure = draw_client_distribution(table, "t")
    assert [tick.get_text() for tick in figure.axes[0].get_xticklabels()] == ["x", "y"]
    assert len(draw_client_map(table, "t").axes) == 3  # two panels and the colour bar


def test_heatmap_cells_carry_the_leaderboards_marks_best_and_ties():
    """Issue 31, item 3: the heatmap marks each column's best (★) and the configurations whose seeds cannot be told
    from it (≈), as the leaderboard's vs_best does."""
    import pandas as pd

    from fedbench.tracking.leaderboard import versus_best
    from fedbench.tracking.plots import draw_heatmap, heatmap_table, interval_bounds

    labels = pd.DataFrame(
        {
            "run_id": range(9),
            "group": ["g1"] * 6 + ["g2"] * 3,
            "configuration": ["a", "a", "a", "b", "b", "b", "a", "a", "a"],
        }
    )
    values = pd.Series([0.90, 0.91, 0.92, 0.10, 0.12, 0.11, 0.5, 0.6, 0.55])
    marks = {key: v.mark for key, v in versus_best(labels.assign(value=values), "max").items()}
    low, high = (heatmap_table(labels, values, bound) for bound in interval_bounds("final.acc_local_mean"))
    figure = draw_heatmap(heatmap_table(labels, values), (low, high), "t", "group", marks)
    cells = {t.get_text() for t in figure.axes[0].texts}
    # each mean with its 95% t interval (3 seeds: mean ± 4.303 x std / sqrt 3); b is clearly worse: no mark
    assert "0.910\n[0.885, 0.935] ★" in cells and "0.110\n[0.085, 0.135]" in cells
    assert "0.550\n[0.426, 0.674] ★" in cells  # g2's only configuration is its best
    assert "-" in cells  # b did not run in g2
    tied = versus_best(
        pd.DataFrame({"group": ["g"] * 4, "configuration": ["a", "a", "b", "b"], "value": [0.88, 0.80, 0.87, 0.86]}),
        "max",
    )
    # 0.84 ± 0.06 against 0.865 ± 0.007
    assert tied[("g", "b")].mark == "best" and tied[("g", "a")].mark.startswith("≈")


def test_figures_name_fields_without_their_section_unless_two_fields_share_a_name():
    from fedbench.tracking.plots import for_figures

    labels = pd.Series(["scenario.alpha=0.1, dataset.num_clients=10", "fedavg client_fraction=0.5, scenario.alpha=1.0"])
    assert for_figures(labels, ["scenario.alpha", "dataset.num_clients", "algorithm.client_fraction"]).tolist() == [
        "alpha=0.1, num_clients=10",
        "fedavg client_fraction=0.5, alpha=1.0",
    ]
    clash = pd.Series(["apfl alpha=0.25, scenario.alpha=0.1"])  # APFL's own alpha beside the scenario's
    assert for_figures(clash, ["algorithm.alpha", "scenario.alpha"]).tolist() == clash.tolist()
