"""Search spaces: parsing, conditional define-by-run sampling, and bad input found before any trial."""

import re
import warnings

import optuna
import pytest
import yaml

from fedbench import api
from fedbench.config import load_task
from fedbench.core.errors import ConfigError, DegenerateRunWarning
from fedbench.tuning import load_search_space, make_plan
from fedbench.tuning.search_space import apply
from tests.conftest import TINY

SPACE = {
    "name": "two_algorithms",
    "space": {
        "optimizer.lr": {"loguniform": [0.01, 0.1]},
        "algorithm": {
            "fedprox": {"mu": {"loguniform": [0.001, 0.1]}},
            "fedavg": {"client_fraction": {"uniform": [0.5, 1.0]}},
        },
    },
}


def write(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(body))
    return path


def task(tmp_path, **changes):
    body = {**TINY, "name": "search_test", **changes}
    body.pop("task")
    return load_task(write(tmp_path, "task.yaml", body))


def test_each_sample_carries_only_the_sampled_algorithms_parameters(tmp_path):
    space = load_search_space(write(tmp_path, "space.yaml", SPACE))
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0), direction="maximize")
    names = set()
    for _ in range(12):
        trial = study.ask()
        space.sample(trial)
        params = trial.params
        names.add(params["algorithm.name"])
        own = {"fedprox": {"algorithm.mu"}, "fedavg": {"algorithm.client_fraction"}}[params["algorithm.name"]]
        assert set(params) == {"optimizer.lr", "algorithm.name"} | own
        spec = apply(task(tmp_path).run_dict(), params)  # every sample is a valid RunSpec
        assert spec.algorithm.name == params["algorithm.name"]
        study.tell(trial, 0.5)
    assert names == {"fedprox", "fedavg"}


def test_a_sampled_algorithm_replaces_the_base_algorithm_and_its_parameters(tmp_path):
    base = task(tmp_path, algorithm={"name": "fedavg", "client_fraction": 0.5}).run_dict()
    spec = apply(base, {"algorithm.name": "fedprox", "algorithm.mu": 0.01})
    assert spec.algorithm.name == "fedprox" and dict(spec.algorithm.params)["mu"] == 0.01
    assert dict(spec.algorithm.params)["client_fraction"] == 1.0  # the default, not the base's 0.5


@pytest.mark.parametrize(
    "space, field, hint",
    [
        ({"optimizer.lr": {"uniform": [0.1, 0.01]}}, "space.optimizer.lr", "low < high"),
        ({"optimizer.lr": {"loguniform": [0.0, 0.1]}}, "space.optimizer.lr", "low > 0"),
        ({"optimizer.lr": {"normal": [0.0, 0.1]}}, "space.optimizer.lr", "loguniform"),
        ({"algorithm": {"fedprox": {"mu": {"int": [1.5, 3]}}}}, "space.algorithm.fedprox.mu", "integer bounds"),
        ({"optimizer.lrr": {"uniform": [0.01, 0.1]}}, "optimizer.lrr", "fields of optimizer"),
        (
            {"algorithm": {"fedprox": {"tau": {"uniform": [0.01, 0.1]}}}},
            "algorithm.tau",
            "parameters of algorithm fedprox",
        ),
        ({"algorithm": {"fedsgd": {"mu": {"uniform": [0.1, 1.0]}}}}, "algorithm.name", "known algorithms"),
        ({"algorithm": {"fedavg": {}}}, "space", "at least one distribution to sample"),
        (
            {"algorithm": {"fedavg": {"client_fraction": {"uniform": [0.5, 1.5]}}}},
            "algorithm.client_fraction",
            "(0, 1]",
        ),
    ],
)
def test_bad_spaces_are_rejected_before_any_trial_naming_the_problem(tmp_path, space, field, hint):
    with pytest.raises(ConfigError) as info:
        make_plan(task(tmp_path), load_search_space(write(tmp_path, "bad.yaml", {"space": space})), 4, "acc_local_mean")
    assert field in str(info.value) and hint in str(info.value)


@pytest.mark.parametrize(
    "kwargs, hint",
    [
        ({"metric": "accuracy"}, "final.acc_local_mean"),  # a metric no run reports: the known ones are listed
        ({"metric": None}, "a metric to search on"),
        ({"metric": "acc_test_time", "scheduler": "asha"}, "reported every round"),
        ({"metric": "acc_local_mean", "num_samples": 0}, "--num-samples"),
    ],
)
def test_bad_search_options_are_rejected(tmp_path, kwargs, hint):
    space = load_search_space(write(tmp_path, "space.yaml", SPACE))
    options = {"num_samples": 4, **kwargs}
    with pytest.raises(ConfigError) as info:
        make_plan(task(tmp_path), space, options["num_samples"], options["metric"], scheduler=options.get("scheduler"))
    assert hint in str(info.value)


def test_a_test_time_metric_needs_test_time_clients(tmp_path):
    scenario = {**TINY["scenario"], "test_clients": {"mode": "none"}}
    with pytest.raises(ConfigError, match="no test-time clients"):
        make_plan(task(tmp_path, scenario=scenario), metric="final.acc_test_time")


@pytest.mark.parametrize(
    "space, task_path, overrides, metric, algorithms",
    [
        ("search_spaces/feroma_tau.yaml", "tasks/feroma_tune.yaml", [], "final.acc_test_time", {"feroma", "fedavg"}),
        (
            "search_spaces/feddrm_lambda.yaml",
            "tasks/feddrm_tune.yaml",
            [],
            "final.acc_system",
            {"feddrm", "fedprox_ft"},
        ),
        (
            "search_spaces/ditto_lambda.yaml",
            "tasks/conditional_97.yaml",
            ["profile=reduced"],
            "final.acc_local_mean",
            {"ditto", "fedavg"},
        ),
        ("search_spaces/fedprox_mu.yaml", "tasks/quickstart.yaml", [], "final.acc_local_mean", {"fedprox", "fedavg"}),
        (
            "search_spaces/moon_mu.yaml",
            "tasks/shift_mitigation.yaml",
            ["profile=reduced", "scenario={preset: made/dirichlet, beta: 0.3}"],
            "final.acc_local_weighted",
            {"moon", "fedavg"},
        ),
    ],
)
def test_shipped_spaces_check_out_on_their_tasks(space, task_path, overrides, metric, algorithms):
    plan = make_plan(
        load_task(task_path, overrides), load_search_space(space), 4, metric
    )  # every field and bound checked
    assert {name for name, _ in plan.space.branches} == algorithms
    assert plan.trials == (4 + len(plan.space.references)) * len(plan.seeds)  # each sample and reference on every seed


@pytest.mark.parametrize(
    "text, hint",
    [
        ("name: bad\nspace: [\n", "valid YAML"),  # a ParserError before
        ('name: "\\q"\n', "valid YAML"),  # a ScannerError before
        ("- a\n- b\n", "a YAML mapping"),  # AttributeError before
        ("name: ../../x\nspace: {optimizer.lr: {uniform: [0.01, 0.1]}}\n", "letters, digits"),
    ],
)
def test_a_malformed_search_space_file_is_a_message_not_a_traceback(tmp_path, text, hint):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_search_space(path)
    assert hint in str(err.value)


def test_a_search_space_file_is_read_as_strictly_as_a_task_file(tmp_path):
    """A key written twice, an alias bomb and a binary file are refused naming the file (issue 32, items 3 and 6)."""
    from tests.config.test_task import billion_laughs

    cases = [
        (
            "name: s\nspace:\n  optimizer.lr: {uniform: [0.01, 0.1]}\n  optimizer.lr: {uniform: [0.1, 0.2]}\n",
            "the key 'optimizer.lr' is written twice",
        ),
        (billion_laughs(9) + "space: {optimizer.lr: {uniform: [0.01, 0.1]}}\n", "at most 200,000 values"),
        (b"space: \xff\xfe", "a UTF-8 text file"),
    ]
    for body, hint in cases:
        path = tmp_path / "space.yaml"
        path.write_bytes(body if isinstance(body, bytes) else body.encode())
        with pytest.raises(ConfigError, match=hint) as err:
            load_search_space(path)
        assert err.value.field == "--search"


def feroma_space(tmp_path, warmup):
    return load_search_space(
        write(
            tmp_path,
            "feroma.yaml",
            {
                "name": "fer",
                "space": {
                    "algorithm": {
                        "feroma": {"tau": {"uniform": [0.0, 0.3]}, "warmup_rounds": {"int": warmup}},
                        "fedavg": {},
                    }
                },
            },
        )
    )


def test_a_range_that_samples_a_degenerate_run_is_refused_naming_the_parameter_range_and_bound(tmp_path):
    """`warmup_rounds` up to 8 on a 4-round run sampled FEROMAs that are FedAvg (issue 33, item 5)."""
    feroma = load_task("tasks/feroma_tune.yaml", ["rounds=4"])
    with pytest.raises(ConfigError) as err:
        make_plan(feroma, feroma_space(tmp_path, [2, 8]), 4, "final.acc_test_time")
    assert err.value.field == "search space fer: algorithm.warmup_rounds" and err.value.value == "int [2, 8]"
    assert "at 8: algorithm.warmup_rounds: 8 >= rounds (4)" in err.value.allowed and "rounds - 1" in err.value.allowed


def test_a_bound_may_name_a_run_field_resolved_on_the_run_searched(tmp_path):
    feroma = load_task("tasks/feroma_tune.yaml", ["rounds=4"])
    plan = make_plan(feroma, feroma_space(tmp_path, [2, "rounds - 1"]), 4, "final.acc_test_time")
    [(name, own)] = plan.space.tuned
    assert name == "feroma" and [d.values for d in own if d.path == "warmup_rounds"] == [(2, 3)]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        assert 2 <= plan.space.sample(study.ask())["algorithm.warmup_rounds"] <= 3  # never a FedAvg in disguise
    longer = make_plan(
        load_task("tasks/feroma_tune.yaml", ["rounds=10"]),
        feroma_space(tmp_path, [2, "rounds - 1"]),
        4,
        "final.acc_test_time",
    )
    assert longer.name != plan.name  # another range, another search
    shipped = make_plan(feroma, load_search_space("search_spaces/feroma_tau.yaml"), 4, "final.acc_test_time")
    assert [d.values for d in dict(shipped.space.branches)["feroma"] if d.path == "warmup_rounds"] == [(2, 3)]


@pytest.mark.parametrize(
    "bound, hint",
    [
        ("rounds * 2", "a run field with an optional + or -"),
        ("__import__('os')", "a run field with an optional + or -"),
        ("nonexistent - 1", "a bound naming a numeric field of the run: "),
        ("rounds - 30", "low < high"),
    ],
)
def test_a_bound_that_is_not_a_run_field_and_offset_is_refused(tmp_path, bound, hint):
    with pytest.raises(ConfigError, match=re.escape(hint)):
        make_plan(
            load_task("tasks/feroma_tune.yaml", ["rounds=4"]),
            feroma_space(tmp_path, [2, bound]),
            4,
            "final.acc_test_time",
        )


@pytest.mark.parametrize(
    "space, field, shown",
    [
        (
            {"tau": {"uniform": [0.0, 0.3]}, "warmup_rounds": {"int": [4, "rounds + 4"]}},  # tau is probed first
            "algorithm.warmup_rounds",
            "int [4, 'rounds + 4'] = [4, 8]",
        ),
        ({"tau": {"uniform": [0.0, 0.3]}}, "algorithm.warmup_rounds", "not sampled"),  # the default 5 in every trial
    ],
)
def test_a_degenerate_run_is_blamed_on_the_field_at_fault_not_the_one_probed(tmp_path, space, field, shown):
    path = write(tmp_path, "fer.yaml", {"name": "fer", "space": {"algorithm": {"feroma": space}}})
    with pytest.raises(ConfigError) as err:
        make_plan(load_task("tasks/feroma_tune.yaml", ["rounds=4"]), load_search_space(path), 4, "final.acc_test_time")
    assert err.value.field == f"search space fer: {field}" and err.value.value == shown
    assert "5 >= rounds (4)" in err.value.allowed if shown == "not sampled" else "4 >= rounds (4)" in err.value.allowed


def test_a_search_does_not_warn_of_the_task_run_it_never_trains_but_the_task_run_alone_does():
    """feroma_tune with rounds=4: its own FEROMA (warm-up 5) is FedAvg, a warning when run; the shipped search
    samples warm-ups of 2 and 3 only, so it says nothing of it."""
    with pytest.warns(DegenerateRunWarning, match="warmup_rounds: 5 >= rounds"):
        load_task("tasks/feroma_tune.yaml", ["rounds=4"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateRunWarning)
        _, plan = api.plan_sweep(
            "tasks/feroma_tune.yaml",
            search="search_spaces/feroma_tau.yaml",
            num_samples=4,
            metric="final.acc_test_time",
            overrides=["rounds=4"],
        )
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    assert {plan.space.sample(study.ask())["algorithm.warmup_rounds"] for _ in range(30)} == {2, 3}


def test_an_unknown_parameter_in_a_space_is_named_once_with_what_is_allowed(tmp_path):
    """The message said the field, the value and the parser's whole message again (issue 47, item 8)."""
    space = write(
        tmp_path, "bad.yaml", {"name": "bad", "space": {"algorithm": {"fedprox": {"mux": {"uniform": [0, 1]}}}}}
    )
    with pytest.raises(ConfigError) as err:
        make_plan(task(tmp_path), load_search_space(space), 2, "final.acc_local_mean")
    text = str(err.value)
    assert text.count("algorithm.mux") == 1 and text.count("got") == 1, text
    assert err.value.field == "search space bad: algorithm.mux" and "client_fraction, mu" in err.value.allowed
