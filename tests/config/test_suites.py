"""The seed papers' suites (tasks/conditional_97.yaml, feroma_drift.yaml, client_scaling.yaml): every profile
loads with the counts its comments state, and every reference block parses against the paper's runs."""

import functools

import pytest

from fedbench.cli import main
from fedbench.config import load_task
from fedbench.config.task import count_data_configurations

METHODS_001 = {"conditional", "local", "fedavg", "gossip", "oracle", "ifca", "dac", "ditto"}
METHODS_002 = {
    "feroma",
    "fedavg",
    "fedrc",
    "fedem",
    "fesem",
    "cfl",
    "ifca",
    "pfedme",
    "apfl",
    "feddrift",
    "atp",
    "local",
    "oracle",
}

# suite -> profile -> (data configurations, runs)
COUNTS = {
    "conditional_97": {"paper": (97, 97 * 8), "reduced": (8, 64), "mnist": (20, 20 * 8 * 3), "smoke": (2, 16)},
    "feroma_drift": {
        "paper": (36, 36 * 13 * 5),
        "reduced": (9, 3 * 13 * 3 + 6 * 3),
        "ranking": (9, 9 * 4 * 3),
        "drift": (2, 2 * 4 * 3),
        "smoke": (1, 13),
    },
    "client_scaling": {"paper": (16, 16 * 13 * 5), "reduced": (4, 4 * 13), "smoke": (2, 6)},
}


@functools.cache
def expanded(suite: str, profile: str):
    task = load_task(f"tasks/{suite}.yaml", [f"profile={profile}"])
    return task, task.expand()


@pytest.mark.filterwarnings("ignore::UserWarning")  # pFedMe ignores momentum: said once per run at load
@pytest.mark.parametrize("suite, profile", [(s, p) for s, profiles in COUNTS.items() for p in profiles])
def test_every_profile_of_every_suite_loads_with_its_stated_counts(suite, profile):
    task, specs = expanded(suite, profile)
    assert set(task.profiles) == set(COUNTS[suite])
    assert task.name == (suite if profile == "paper" else f"{suite}-{profile}")
    assert (count_data_configurations(specs), len(specs)) == COUNTS[suite][profile]
    assert task.reference  # the published tables come with every profile, for its report


def test_conditional_97_is_the_papers_grid_of_e1_to_e4_by_eight_methods():
    _, specs = expanded("conditional_97", "paper")
    assert {s.algorithm.name for s in specs} == METHODS_001
    assert all(s.algorithm.kwargs["centralized_pool"] for s in specs if s.algorithm.name == "conditional")  # 001 III-C
    per_preset = {}
    for s in specs:
        per_preset.setdefault(s.scenario.preset, set()).add(
            (s.dataset.name, s.scenario.num_clients, repr(s.scenario.shifts), repr(s.scenario.partition))
        )
    # the decomposition the task file's comments give: 61 + 3 + 6 + 7 + 12 + 5 + 3 = 97
    assert {p: len(v) for p, v in per_preset.items()} == {
        "conditional/E1": 61,
        "conditional/E2a": 3,
        "conditional/E2b": 6,
        "conditional/E3a": 7,
        "conditional/E3b": 12,
        "conditional/E4a": 5,
        "conditional/E4b": 3,
    }
    assert {s.dataset.name for s in specs} == {"mnist", "fmnist", "cifar10", "cifar100", "mixture"}
    assert {s.model.name for s in specs if s.dataset.name.startswith("cifar")} == {"cnn_cifar"}
    # 001 Sec. IV-A: 5 (rich) to 100 (super sparse) clients per cluster, K = 10 reaching 1,000 clients
    assert max(s.scenario.num_clients for s in specs) == 10 * 100
    assert {(s.rounds, s.local_epochs, s.batch_size, s.optimizer.lr, s.seed) for s in specs} == {(20, 1, 64, 0.01, 0)}


def test_conditional_97_reduced_is_e1_on_mnist_and_fmnist_at_k_2_and_5_rich_and_sparse():
    _, specs = expanded("conditional_97", "reduced")
    assert {
        (
            s.dataset.name,
            s.scenario.partition.kwargs["clusters"],
            s.scenario.num_clients // s.scenario.partition.kwargs["clusters"],
        )
        for s in specs
    } == {(d, k, n) for d in ("mnist", "fmnist") for k in (2, 5) for n in (5, 20)}
    assert {s.algorithm.name for s in specs} == METHODS_001


def test_conditional_97_mnist_runs_the_papers_rounds_over_every_28x28_cell_of_tables_i_ii_and_iv():
    _, specs = expanded("conditional_97", "mnist")
    assert {s.rounds for s in specs} == {20} and {s.seed for s in specs} == {0, 1, 2}
    assert {s.algorithm.name for s in specs} == METHODS_001
    ran = {(s.scenario.preset, s.dataset.name, s.scenario.num_clients) for s in specs}
    published = [
        dict(cell.where)
        for table in load_task("tasks/conditional_97.yaml").reference
        if table.source.startswith(("001 Table I ", "001 Table IV"))
        for cell in table.cells
        if dict(cell.where)["dataset.name"] in ("mnist", "fmnist", "mixture")
    ]
    assert len(published) == 8 * 8 + 3 * 4  # Table IV's 28x28 half; Table I's E2b, E3a and E4a rows
    assert all((w["scenario.preset"], w["dataset.name"], w["scenario.num_clients"]) in ran for w in published)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_feroma_drift_is_002s_grid_and_its_reduced_profile_table_14_at_the_papers_rounds():
    _, specs = expanded("feroma_drift", "paper")
    assert {s.algorithm.name for s in specs} == METHODS_002
    assert {s.scenario.num_clients for s in specs} == {20} and {s.scenario.drift_every for s in specs} == {1, 2, 4}
    assert {s.seed for s in specs} == {42, 43, 44, 45, 46} and {s.rounds for s in specs} == {20}
    _, reduced = expanded("feroma_drift", "reduced")
    methods = {
        level: {s.algorithm.name for s in reduced if s.scenario.preset == f"feroma/label_skew/{level}"}
        for level in ("low", "medium", "high")
    }
    assert methods == {"low": {"feroma"}, "medium": METHODS_002, "high": {"feroma"}}
    assert {(s.rounds, s.seed, s.scenario.drift_every) for s in reduced} == {
        (20, seed, every) for seed in (42, 43, 44) for every in (4, 2, 1)
    }

    def fields(spec):
        return repr(sorted((k, repr(v)) for k, v in spec.flat().items() if k != "task"))

    paper = {fields(s) for s in specs}
    assert all(fields(s) in paper for s in reduced)  # the paper's own configurations, at 3 of its 5 seeds


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_client_scaling_duplicates_the_pool_as_002_i3_does():
    _, specs = expanded("client_scaling", "paper")
    assert {(s.scenario.num_clients, s.scenario.copies) for s in specs} == {(10, 1), (20, 1), (50, 2), (100, 3)}
    assert {s.scenario.preset.rsplit("/", 1)[1] for s in specs} == {"medium"}


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_reference_tables_are_transcribed_whole_and_match_runs_of_the_grid():
    task, specs = expanded("feroma_drift", "paper")
    tables = {t.source.split(" (")[0]: t for t in task.reference}
    # Tables 13-16: 11 methods x 9; Table 14's 10 baselines again under the same-index association; App. E Table 5
    assert [len(t.cells) for t in task.reference] == [11 * 9] * 2 + [10 * 9] + [11 * 9] * 2 + [9]
    baselines = [
        (c.where, c.value, c.std)
        for c in tables["002 App. I.2, Table 14"].cells
        if dict(c.where)["algorithm.name"] != "feroma"
    ]
    index_read = tables["002 App. I.2, Table 14 again"]
    assert index_read.metric == "final.acc_test_time_index"
    assert sorted(map(str, baselines)) == sorted(str((c.where, c.value, c.std)) for c in index_read.cells)
    cell = {
        dict(c.where)["algorithm.name"]: c
        for c in tables["002 App. I.2, Table 14"].cells
        if dict(c.where)["scenario.preset"] == "feroma/label_skew/medium" and dict(c.where)["scenario.drift_every"] == 2
    }
    assert (cell["feroma"].value, cell["feroma"].std, cell["fedavg"].value, cell["fedavg"].std) == (
        97.94,
        2.01,
        82.83,
        9.38,
    )
    # every published value of Tables 13-16 comes with its std over the paper's seeds
    assert all(c.std is not None for t in task.reference[:5] for c in t.cells)
    # every published cell names runs the paper profile has
    runs = [s.flat() for s in specs]
    for table in task.reference:
        for c in table.cells:
            assert any(all(r.get(k) == v for k, v in c.where) for r in runs), (table.source, c.where)
    scaling, _ = expanded("client_scaling", "paper")
    nulls = [dict(c.where) for t in scaling.reference for c in t.cells if c.value is None]
    assert {(w["algorithm.name"], w["scenario.num_clients"]) for w in nulls} == {("feddrift", 50), ("feddrift", 100)}
    cond, cond_specs = expanded("conditional_97", "paper")
    # Tables II, II's Gossip row read after the exchange, V, III, IV, I, Sec. V text
    assert [len(t.cells) for t in cond.reference] == [96, 12, 40, 24, 96, 16, 15]
    runs = [s.flat() for s in cond_specs]
    for table in cond.reference:
        for c in table.cells:
            assert any(all(r.get(k) == v for k, v in c.where) for r in runs), (table.source, c.where)


@pytest.mark.parametrize(
    "suite, profile, runs, configurations",
    [("conditional_97", "reduced", 64, 8), ("feroma_drift", "smoke", 13, 1), ("client_scaling", "smoke", 6, 2)],
)
def test_dry_run_prints_runs_and_data_configurations(suite, profile, runs, configurations, capsys):
    assert main(["sweep", f"tasks/{suite}.yaml", "--profile", profile, "--dry-run"]) == 0
    assert f"{runs} configurations, {configurations} data configurations" in " ".join(capsys.readouterr().out.split())
    assert main(["run", f"tasks/{suite}.yaml", "--profile", profile, "--dry-run"]) == 0
    assert f"{runs} runs, {configurations} data configurations" in " ".join(capsys.readouterr().out.split())
