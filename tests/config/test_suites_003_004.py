"""The suites of seeds 003 and 004 (tasks/shift_mitigation.yaml, tasks/feddrm_lambda.yaml): every profile loads
and expands to the runs its header counts, the profiles keep the paper's methods, and the reference tables
name cells some paper run stands for."""

from __future__ import annotations

import pytest

from fedbench.cli import main
from fedbench.config import load_task
from fedbench.config.reference import ReferenceTable

FEDDRM, SHIFTS = "tasks/feddrm_lambda.yaml", "tasks/shift_mitigation.yaml"


@pytest.mark.parametrize(
    "path, profile, runs",
    [
        (FEDDRM, "paper", 28),
        (FEDDRM, "reduced", 54),
        (FEDDRM, "smoke", 4),
        (SHIFTS, "paper", 54),
        (SHIFTS, "reduced", 54),
        (SHIFTS, "smoke", 6),
    ],
)
def test_every_profile_loads_and_expands_to_its_counted_runs(path, profile, runs, capsys):
    task = load_task(path, [f"profile={profile}"])
    assert task.profiles == ("paper", "reduced", "smoke") and len(task.expand()) == runs
    assert main(["sweep", path, "--dry-run", "--profile", profile]) == 0
    assert f"{runs} configurations" in capsys.readouterr().out


def test_feddrm_suite_paper_grid_is_004s_lambdas_partitions_and_datasets():
    specs = load_task(FEDDRM).expand()
    lams = {s.algorithm.kwargs["lam"] for s in specs if s.algorithm.name == "feddrm"}
    assert lams == {0.5, 0.6, 0.7, 0.8, 0.9, 0.95}
    assert {s.dataset.name for s in specs} == {"cifar10", "cifar100"}
    shards = {
        (s.dataset.name, s.scenario.partition.kwargs.get("shards_per_client"))
        for s in specs
        if s.scenario.partition.name == "shards"
    }
    assert shards == {("cifar10", 5), ("cifar100", 25)}  # 004 Table 1: 5-SPC and 25-SPC
    assert {s.rounds for s in specs} == {800} and {s.algorithm.kwargs.get("ft_rounds") for s in specs} >= {100}


@pytest.mark.parametrize("profile", ["reduced", "smoke"])
def test_feddrm_small_profiles_run_on_colourised_data_with_both_methods(profile):
    specs = load_task(FEDDRM, [f"profile={profile}"]).expand()
    assert all(s.dataset.kwargs["colourise"] for s in specs)
    assert {s.algorithm.name for s in specs} == {"feddrm", "fedavg_ft"}
    assert all(s.algorithm.kwargs["ft_rounds"] < s.rounds for s in specs if s.algorithm.name == "fedavg_ft")


def test_shift_suite_pairs_003s_federations_with_fedavg_made_and_moon():
    specs = load_task(SHIFTS).expand()
    assert {s.algorithm.name for s in specs} == {"fedavg", "made", "moon"}
    alphas = {s.scenario.partition.kwargs["alpha"] for s in specs if s.scenario.preset == "made/dirichlet"}
    assert alphas == {0.1, 0.3, 0.5, 0.7, 1.0}
    writers = [s for s in specs if s.scenario.preset == "made/writers_noise"]
    assert writers and all(s.scenario.num_clients == 30 and s.dataset.name == "femnist" for s in writers)
    # MADE's density rounds come out of the run's: 003's T = 5 task rounds remain.
    assert {s.rounds - s.algorithm.kwargs["density_rounds"] for s in specs if s.algorithm.name == "made"} == {5}


def matching(table: ReferenceTable, specs) -> list[int]:
    """For each cell, how many runs have every field value it names."""
    flats = [spec.flat() for spec in specs]
    return [sum(all(flat.get(k) == v for k, v in cell.where) for flat in flats) for cell in table.cells]


@pytest.mark.parametrize("path", [FEDDRM, SHIFTS])
def test_every_published_cell_stands_for_some_run_of_one_profile(path):
    """A table of the paper's setting matches paper-profile runs; one set beside an offline analogue (003's feature
    shift without writer ids) matches the analogue's profiles; none matches no run at all."""
    task = load_task(path)
    assert task.reference and all(isinstance(t, ReferenceTable) and t.source for t in task.reference)
    specs = [spec for profile in task.profiles for spec in load_task(path, [f"profile={profile}"]).expand()]
    for table in task.reference:
        assert min(matching(table, specs)) >= 1, table.title


def test_published_values_are_transcribed_as_printed():
    [table1] = [t for t in load_task(FEDDRM).reference if t.title.startswith("System accuracy (pooled")]
    system = {
        dict(c.where)["algorithm.name"]
        + "/"
        + dict(c.where)["dataset.name"]
        + "/"
        + dict(c.where)["scenario.preset"]: c.value
        for c in table1.cells
    }
    assert system["feddrm/cifar10/feddrm/dir0.3"] == 63.85 and system["fedavg_ft/cifar100/feddrm/spc"] == 27.96
    [made] = [c.value for c in load_task(SHIFTS).reference[0].cells if dict(c.where)["algorithm.name"] == "made"]
    assert made == 0.9068
