import dataclasses
import subprocess
import sys

import pytest
import yaml

from fedbench.config import load_task, parse_run
from fedbench.config.task import resolve_run
from fedbench.core.errors import ConfigError, UnknownNameError
from tests.conftest import TINY, tiny_spec


def write_task(tmp_path, body: dict) -> str:
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(body))
    return str(path)


def test_grid_times_seeds_expands_to_distinct_runspecs(tmp_path):
    body = {k: v for k, v in TINY.items() if k != "task"}
    body.update(name="t", seeds=[0, 1], grid={"algorithm": ["fedavg", "local"], "scenario.alpha": [0.1, 1.0]})
    specs = load_task(write_task(tmp_path, body)).expand()
    assert len(specs) == 8
    assert len({s.run_hash for s in specs}) == 8
    assert {s.seed for s in specs} == {0, 1}
    assert {s.scenario.partition.kwargs["alpha"] for s in specs} == {0.1, 1.0}
    assert all(s.task == "t" for s in specs)


def test_each_seeds_run_is_the_run_parsed_at_that_seed_and_set_seed_is_the_only_seed(tmp_path):
    """The expansion parses a grid point once and copies it per seed: each copy must equal a parse at its seed."""
    body = {k: v for k, v in TINY.items() if k != "task"}
    body.update(name="t", seeds=[3, 0, 1], grid={"algorithm": ["fedavg", "local"]})
    task = load_task(write_task(tmp_path, body))
    specs = task.expand()
    assert [(s.algorithm.name, s.seed) for s in specs] == [(a, seed) for a in ("fedavg", "local") for seed in (3, 0, 1)]
    for block_point, group in zip((["fedavg"], ["local"]), (specs[:3], specs[3:]), strict=True):
        for spec in group:
            parsed = resolve_run(task.run_dict(block_point, spec.seed))
            assert spec.replace(run_name=None) == parsed and spec.run_hash == parsed.run_hash
    fixed = load_task(write_task(tmp_path, body), ["seed=9"]).expand()
    assert [(s.algorithm.name, s.seed) for s in fixed] == [("fedavg", 9), ("local", 9)]


def test_set_overrides_every_run_and_replaces_grid_axes(tmp_path):
    body = {k: v for k, v in TINY.items() if k != "task"}
    body.update(name="t", seeds=[0, 1, 2], grid={"algorithm": ["fedavg", "local"]})
    path = write_task(tmp_path, body)
    specs = load_task(path, ["rounds=7", "algorithm=local", "seeds=[5]", "optimizer.lr=0.1"]).expand()
    assert len(specs) == 1
    (spec,) = specs
    assert (spec.rounds, spec.algorithm.name, spec.seed, spec.optimizer.lr) == (7, "local", 5, 0.1)


def test_a_loaded_task_takes_more_overrides_after_its_own_as_text_or_pairs(tmp_path):
    body = {k: v for k, v in TINY.items() if k != "task"}
    body.update(name="t", seeds=[0, 1], grid={"algorithm": ["fedavg", "local"], "scenario.alpha": [0.1, 1.0]})
    task = load_task(write_task(tmp_path, body), ["algorithm=local", "rounds=7"])
    more = task.with_overrides(["seeds=[5]", ("optimizer.lr", 0.2), ("rounds", 3), ("name", "t2")])
    assert task.with_overrides([]) is task
    specs = more.expand()
    assert {(s.algorithm.name, s.seed, s.optimizer.lr, s.rounds, s.task) for s in specs} == {("local", 5, 0.2, 3, "t2")}
    assert {s.scenario.partition.kwargs["alpha"] for s in specs} == {0.1, 1.0}  # the other grid axis stays


def test_runspec_round_trips_and_is_frozen():
    spec = tiny_spec(algorithm={"name": "fedavg", "client_fraction": 0.5})
    again = parse_run(yaml.safe_load(spec.to_yaml()))
    assert again == spec and again.run_hash == spec.run_hash
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.rounds = 3  # type: ignore[misc]


def test_hash_is_stable_across_processes_and_ignores_where_it_runs():
    spec = tiny_spec()
    code = "from tests.conftest import tiny_spec; print(tiny_spec().run_hash)"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other == spec.run_hash and len(spec.run_hash) == 10
    moved = tiny_spec(resources={"backend": "ray", "client_cpus": 2})
    assert moved.run_hash == spec.run_hash
    assert tiny_spec(seed=1).run_hash != spec.run_hash
    assert tiny_spec(algorithm={"name": "fedavg", "client_fraction": 0.5}).run_hash != spec.run_hash


def test_defaults_are_filled_into_the_runspec():
    spec = tiny_spec()
    assert spec.algorithm.kwargs == {"client_fraction": 1.0}
    assert spec.scenario.test_fraction == 0.2  # FEROMA's 20% local evaluation split
    assert spec.scenario.partition.kwargs["min_samples"] == 10


@pytest.mark.parametrize(
    "changes, field, hint",
    [
        ({"epochs": 3}, "epochs", "top-level fields are"),
        ({"rounds": "ten"}, "rounds", "an integer"),
        ({"rounds": 0}, "rounds", ">= 1"),
        ({"algorithm": {"name": "fedavg", "client_fraction": 1.5}}, "algorithm.client_fraction", "(0, 1]"),
        ({"algorithm": {"name": "fedavg", "mu": 0.1}}, "algorithm.mu", "client_fraction"),
        ({"scenario": {"partition": "dirichlet", "alpha": "big"}}, "scenario.alpha", "a number"),
        ({"scenario": {"partition": "iid", "test_fraction": 1.5}}, "scenario.test_fraction", "[0, 1)"),
        ({"optimizer": {"name": "lbfgs"}}, "optimizer.name", "'sgd', 'adam'"),
        ({"model": {"name": "mlp", "width": 3}}, "model.width", "hidden"),
        ({"local_steps": 0}, "local_steps", ">= 1"),
        ({"optimizer": {"name": "sgd", "schedule": "step"}}, "optimizer.schedule", "'cosine'"),
        (
            {"algorithm": {"name": "conditional", "centralized_pool": True}, "local_steps": 10},
            "local_steps",
            "centralized_pool",
        ),
        # a model the algorithm cannot train: refused when the task loads, not when its runs start
        ({"algorithm": "feddrm", "model": "mlp"}, "model.name", "client path for feddrm: feddrm_net"),
        ({"algorithm": "conditional", "model": "lenet5"}, "model.name", "taking cond_dim"),
        ({"algorithm": "conditional", "model": {"name": "mlp", "cond_dim": 8}}, "model.cond_dim", "num_eigenvalues"),
    ],
)
def test_bad_fields_name_the_path_the_value_and_what_is_allowed(changes, field, hint):
    with pytest.raises(ConfigError) as info:
        tiny_spec(**changes)
    message = str(info.value)
    assert message.startswith(field + ":"), message
    assert hint in message


@pytest.mark.parametrize("section, name", [("algorithm", "fedsgd"), ("model", "vgg"), ("dataset", "imagenet")])
def test_unknown_names_list_the_known_ones(section, name):
    with pytest.raises(UnknownNameError) as info:
        tiny_spec(**{section: name})
    assert f"{section}.name: got {name!r}" in str(info.value)
    known = {"algorithm": ["fedavg", "local"], "model": ["lenet5"], "dataset": ["digits"]}[section]
    assert all(name in str(info.value) for name in known)


def test_bad_override_and_bad_yaml(tmp_path):
    body = {k: v for k, v in TINY.items() if k != "task"}
    with pytest.raises(ConfigError, match="--set"):
        load_task(write_task(tmp_path, body), ["rounds"])
    broken = tmp_path / "broken.yaml"
    broken.write_text("rounds: [1, 2\n")
    with pytest.raises(ConfigError, match="valid YAML"):
        load_task(broken)
    with pytest.raises(ConfigError, match="existing task YAML"):
        load_task(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="grid.rounds"):
        load_task(write_task(tmp_path, {**body, "grid": {"rounds": 3}}))


def test_shipped_quickstart_task_expands():
    specs = load_task("tasks/quickstart.yaml").expand()
    assert len(specs) == 18
    assert {s.algorithm.name for s in specs} == {"fedavg", "local"}


@pytest.mark.parametrize(
    "scenario, dataset, expected",
    [
        ({"preset": "feroma/label_skew/medium"}, "digits", {"mode": "none", "mean": [], "std": []}),
        ({"preset": "feddrm/dir0.3"}, "digits", {"mode": "values", "mean": [0.5] * 3, "std": [0.5] * 3}),
        ({"preset": "conditional/E1", "clusters": 2}, "digits", {"mode": "dataset", "mean": [], "std": []}),
        ({"partition": "iid"}, "digits", {"mode": "dataset", "mean": [], "std": []}),
    ],
)
def test_normalisation_defaults_to_what_the_presets_paper_used(scenario, dataset, expected):
    from fedbench.config.task import task_from_dict

    [spec] = task_from_dict({**TINY, "dataset": dataset, "scenario": scenario}).expand()
    assert spec.to_dict()["normalize"] == expected
    assert spec.flat()["normalize.mode"] == expected["mode"]  # recorded with the run's params
    [own] = task_from_dict({**TINY, "dataset": dataset, "scenario": scenario, "normalize": "dataset"}).expand()
    assert own.normalize.mode == "dataset"  # the task's own choice wins over the preset's


def test_a_bad_value_of_a_later_shift_fails_the_task_at_load_naming_its_path(tmp_path):
    body = {
        **{k: v for k, v in TINY.items() if k != "task"},
        "name": "t",
        "model": "lenet5",
        "dataset": {"name": "synthetic_images", "train_samples": 600, "test_samples": 100},
        "scenario": {
            "partition": "iid",
            "shifts": [{"name": "rotation", "clusters": 2}, {"name": "noise", "sigma": -0.5}],
        },
    }
    with pytest.raises(ConfigError) as info:
        load_task(write_task(tmp_path, body))
    assert info.value.field == "scenario.shifts[1].sigma"


def test_scientific_notation_is_a_number_in_task_files_and_overrides(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({**TINY, "optimizer": {"name": "sgd", "lr": "1e-2"}}).replace("'1e-2'", "1e-2"))
    [spec] = load_task(path, ["optimizer.weight_decay=5e-4"]).expand()
    assert spec.optimizer.lr == 0.01 and spec.optimizer.weight_decay == 0.0005
    with pytest.raises(ConfigError, match="^optimizer.lr: got 'fast'"):
        load_task(path, ["optimizer.lr=fast"])


def test_feroma_whose_warmup_covers_the_run_warns_at_task_load():
    with pytest.warns(UserWarning, match="warmup_rounds"):
        tiny_spec(algorithm={"name": "feroma", "warmup_rounds": 5}, rounds=5, model="lenet5")


@pytest.mark.parametrize("name", ["../../../tmp/x", "/tmp/x", "a/b", "..", "", "two words", 7])
def test_a_task_name_that_is_not_a_safe_slug_is_refused_naming_name(tmp_path, name):
    body = {**{k: v for k, v in TINY.items() if k != "task"}, "name": name}
    with pytest.raises(ConfigError) as err:
        load_task(write_task(tmp_path, body))
    assert err.value.field == "name" and "letters, digits" in err.value.allowed


@pytest.mark.parametrize(
    "changes, field, hint",
    [
        ({"optimizer": {"name": "sgd", "lr": 0}}, "optimizer.lr", "> 0"),
        ({"rounds": 10**12}, "rounds", "at most 100,000"),
        ({"resources": {"backend": "ray", "num_workers": 0}}, "resources.num_workers", ">= 1"),
    ],
)
def test_values_that_cannot_mean_anything_are_refused_naming_the_field(tmp_path, changes, field, hint):
    body = {**{k: v for k, v in TINY.items() if k != "task"}, "name": "t", **changes}
    with pytest.raises(ConfigError) as err:
        load_task(write_task(tmp_path, body))
    assert err.value.field == field and hint in err.value.allowed


@pytest.mark.parametrize(
    "dataset, scenario, field, allowed",
    [
        (
            "digits",
            {"partition": "iid", "num_clients": 5000},
            "scenario.num_clients",
            "at most 479: digits has 1437 training samples",
        ),
        (
            "digits",
            {"partition": "shards", "num_clients": 5000, "shards_per_client": 2},
            "scenario.num_clients",
            "at most 479",
        ),
        (
            {"name": "digits", "test_fraction": 0.5},
            {"partition": "iid", "num_clients": 300},
            "scenario.num_clients",
            "at most 299: digits has 898 training samples",
        ),  # the option sets the official split
        (
            "digits",
            {"partition": "iid", "num_clients": 400, "local_test": "official"},
            "scenario.num_clients",
            "at most 360",
        ),
        (
            "digits",
            {"partition": "dirichlet", "num_clients": 5000},
            "scenario.num_clients",
            "at most 479",
        ),  # was min_samples at run time
        ("digits", {"partition": "dirichlet", "num_clients": 200}, "scenario.min_samples", "at most 7 for 200 clients"),
    ],
)
def test_a_federation_leaving_clients_without_samples_is_refused_at_load(tmp_path, dataset, scenario, field, allowed):
    body = {**{k: v for k, v in TINY.items() if k != "task"}, "name": "t", "dataset": dataset, "scenario": scenario}
    with pytest.raises(ConfigError) as err:
        load_task(write_task(tmp_path, body))
    assert err.value.field == field and allowed in err.value.allowed, err.value
    body["scenario"] = {**scenario, "num_clients": 20}
    load_task(write_task(tmp_path, body))


def test_a_name_key_in_the_scenario_is_refused_rather_than_replacing_the_partition(tmp_path):
    body = {
        **{k: v for k, v in TINY.items() if k != "task"},
        "name": "t",
        "scenario": {"partition": "iid", "name": "dirichlet"},
    }
    with pytest.raises(ConfigError) as err:
        load_task(write_task(tmp_path, body))
    assert err.value.field == "scenario.name" and "write partition: dirichlet" in err.value.allowed


def test_runs_are_named_by_what_varies_in_their_task():
    names = [s.label for s in load_task("tasks/quickstart.yaml").expand()]
    assert "fedavg-a0.1-s0" in names and "fedavg-cf0.5-a1.0-s2" in names and "local-a0.1-s1" in names
    assert len(set(names)) == len(names)
    feroma = load_task("tasks/feroma_drift.yaml", ["seeds=[42]"]).expand()
    assert "feroma-feroma_label_skew_medium-de2-s42" in {s.label for s in feroma}
    # a mapping on an axis reads as its preset (or name), then its other entries, nested ones included
    e2b = {s.label for s in load_task("tasks/conditional_97.yaml").expand() if s.scenario.preset == "conditional/E2b"}
    assert {"fedavg-mnist-conditional_E2b_c2-s0", "fedavg-fmnist-conditional_E2b_c4-s0"} <= e2b
    shifts = {s.label for s in load_task("tasks/shift_mitigation.yaml", ["profile=reduced"]).expand()}
    assert "made-piid_nc30_snoise_s0.5_tcmnone-s2" in shifts
    # the name is not part of what a run computes
    spec = feroma[0]
    assert spec.replace(run_name="other").run_hash == spec.run_hash


PROFILED = {
    "name": "suite",
    "seeds": [0, 1],
    "grid": {"algorithm": ["fedavg", "local"], "scenario.alpha": [0.1, 1.0]},
    "profiles": {"smoke": {"rounds": 1, "seeds": [7], "grid.scenario.alpha": [0.5]}, "reduced": {"seeds": [0]}},
}


def test_a_profile_applies_its_overrides_under_its_own_experiment(tmp_path):
    path = write_task(tmp_path, {**{k: v for k, v in TINY.items() if k != "task"}, **PROFILED})
    paper = load_task(path)
    assert (paper.name, paper.profile, paper.profiles[0]) == ("suite", "paper", "paper")
    assert set(paper.profiles) == {"paper", "smoke", "reduced"}
    assert len(paper.expand()) == 8
    smoke = load_task(path, ["profile=smoke"])
    specs = smoke.expand()
    assert smoke.name == "suite-smoke" and {s.task for s in specs} == {"suite-smoke"}
    # the dotted grid axis is replaced whole; the other axis and the base stay as written
    assert {(s.algorithm.name, s.scenario.partition.kwargs["alpha"], s.seed, s.rounds) for s in specs} == {
        ("fedavg", 0.5, 7, 1),
        ("local", 0.5, 7, 1),
    }
    # the command line's --set wins over the profile, and more overrides keep the profile
    assert {s.seed for s in load_task(path, ["profile=smoke", "seeds=[3]"]).expand()} == {3}
    more = smoke.with_overrides(["rounds=2"])
    assert more.name == "suite-smoke" and {s.rounds for s in more.expand()} == {2}


def test_bad_profiles_are_refused_naming_what_the_file_offers(tmp_path):
    body = {**{k: v for k, v in TINY.items() if k != "task"}, **PROFILED}
    with pytest.raises(ConfigError, match=r"profile.*tiny.*one of paper, (smoke, reduced|reduced, smoke)"):
        load_task(write_task(tmp_path, body), ["profile=tiny"])
    with pytest.raises(ConfigError, match="profiles.paper"):
        load_task(write_task(tmp_path, {**body, "profiles": {"paper": {"rounds": 1}}}))
    with pytest.raises(ConfigError, match="profiles"):
        load_task(write_task(tmp_path, {**body, "profiles": {"smoke": [1, 2]}}))


def test_a_dotted_grid_axis_can_be_replaced_from_the_command_line(tmp_path):
    body = {**{k: v for k, v in TINY.items() if k != "task"}, "grid": {"scenario.alpha": [0.1, 1.0]}}
    specs = load_task(write_task(tmp_path, body), ["grid.scenario.alpha=[0.3]"]).expand()
    assert [s.scenario.partition.kwargs["alpha"] for s in specs] == [0.3]


def test_a_grid_may_be_a_list_of_blocks_each_expanded_and_concatenated(tmp_path):
    body = {
        **{k: v for k, v in TINY.items() if k != "task"},
        "name": "t",
        "seeds": [0, 1],
        "grid": [
            {"algorithm": ["fedavg", "local"], "scenario.alpha": [0.1]},
            {"algorithm": ["fedavg"], "scenario.alpha": [0.1, 1.0], "rounds": [3]},
            {"scenario.alpha": [0.1], "algorithm": ["local"]},
        ],
    }  # a run the first block has: kept once
    path = write_task(tmp_path, body)
    task = load_task(path)
    specs = task.expand()
    assert len(specs) == (2 + 2) * 2
    assert {(s.algorithm.name, s.scenario.partition.kwargs["alpha"], s.rounds) for s in specs} == {
        ("fedavg", 0.1, TINY["rounds"]),
        ("local", 0.1, TINY["rounds"]),
        ("fedavg", 0.1, 3),
        ("fedavg", 1.0, 3),
    }
    assert task.grid_fields()[1] == {"algorithm": ["fedavg"], "scenario.alpha": [0.1, 1.0], "rounds": [3]}
    # grid.X sets the axis in every block; a run override drops it from every block
    assert {s.scenario.partition.kwargs["alpha"] for s in load_task(path, ["grid.scenario.alpha=[0.5]"]).expand()} == {
        0.5
    }
    assert len(load_task(path, ["rounds=4"]).expand()) == 3 * 2  # (fedavg, 0.1) and (local, 0.1) and (fedavg, 1.0)
    with pytest.raises(ConfigError, match=r"grid\[1\].rounds"):
        load_task(write_task(tmp_path, {**body, "grid": [body["grid"][0], {"rounds": 3}]}))
    with pytest.raises(ConfigError, match=r"grid\[0\]"):
        load_task(write_task(tmp_path, {**body, "grid": [["fedavg"]]}))


def test_data_configurations_set_aside_algorithm_and_seed_only():
    from fedbench.config.task import count_data_configurations

    specs = load_task("tasks/quickstart.yaml").expand()  # 3 algorithm settings x 2 alphas x 3 seeds
    assert len(specs) == 18 and count_data_configurations(specs) == 2
    assert count_data_configurations([tiny_spec(), tiny_spec(seed=3), tiny_spec(algorithm="local")]) == 1
    assert (
        count_data_configurations(
            [tiny_spec(), tiny_spec(rounds=3), tiny_spec(scenario={"partition": "iid", "num_clients": 4})]
        )
        == 3
    )


def test_a_tasks_runs_share_each_component_parsed_once_and_a_bad_one_still_names_its_place(tmp_path):
    body = {k: v for k, v in TINY.items() if k != "task"}
    body.update(name="t", seeds=[0, 1, 2], grid={"algorithm": ["fedavg", {"name": "fedprox", "mu": 0.1}]})
    specs = load_task(write_task(tmp_path, body)).expand()
    fedprox = [s.algorithm for s in specs if s.algorithm.name == "fedprox"]
    assert len(fedprox) == 3 and all(a is fedprox[0] for a in fedprox)  # one parse, shared by the seeds' runs
    assert dict(fedprox[0].params)["mu"] == 0.1
    assert all(s.model is specs[0].model for s in specs)
    body["grid"] = {"algorithm": ["fedavg", {"name": "fedprox", "mu": -1.0}]}
    for _ in range(2):  # a failed parse is not remembered: the error comes each time, naming the field
        with pytest.raises(ConfigError, match="algorithm.mu"):
            load_task(write_task(tmp_path, body))


def test_the_parse_memo_is_the_opening_threads_own():
    import threading

    from fedbench.config.parse import components_parsed_once

    raw = {**TINY, "seed": 0}
    seen = []
    with components_parsed_once():
        first = parse_run(raw).algorithm
        assert parse_run(raw).algorithm is first  # shared here
        thread = threading.Thread(target=lambda: seen.append(parse_run(raw).algorithm))
        thread.start()
        thread.join()
    assert seen[0] is not first and seen[0] == first  # another thread parses for itself, to the same value
    assert parse_run(raw).algorithm is not first  # and once closed, nothing is remembered


def test_a_key_written_twice_is_refused_in_a_task_file_and_in_a_set_value(tmp_path):
    """YAML keeps the last of two equal keys without a word; a task's `rounds` written twice is a mistake to show
    (issue 32, item 6)."""
    path = tmp_path / "task.yaml"
    path.write_text("name: dup\ndataset: digits\nrounds: 3\nmodel: {name: mlp, hidden: [16]}\nrounds: 5\n")
    with pytest.raises(ConfigError, match=r"the key 'rounds' is written twice \(lines 3 and 5\)"):
        load_task(str(path))
    body = {k: v for k, v in TINY.items() if k != "task"}
    with pytest.raises(ConfigError, match="the key 'hidden' is written twice") as err:
        load_task(write_task(tmp_path, {**body, "name": "t"}), ["model={name: mlp, hidden: [8], hidden: [9]}"])
    assert err.value.field == "--set"


def test_seeds_are_distinct_integers_a_generator_takes():
    body = {**{k: v for k, v in TINY.items() if k != "task"}, "name": "t"}
    from fedbench.config.task import task_from_dict

    for seeds, allowed in (
        ([0, 0], "a seed listed twice is the same run"),
        ([2**70], r"\[0, 2\^32\)"),
        ([-1], r"\[0, 2\^32\)"),
        ([True], r"\[0, 2\^32\)"),
    ):
        with pytest.raises(ConfigError, match=allowed) as err:
            task_from_dict({**body, "seeds": seeds})
        assert err.value.field == "seeds"
    assert task_from_dict({**body, "seeds": [0, 2**32 - 1]}).seeds == (0, 2**32 - 1)


def test_a_binary_task_file_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "task.yaml"
    path.write_bytes(b"name: t\n\xff\xfe\x00binary")
    with pytest.raises(ConfigError, match="a UTF-8 text file") as err:
        load_task(str(path))
    assert err.value.field == "task"


def billion_laughs(levels: int) -> str:
    """A task whose description nests `levels` levels of nine aliases: 9^levels values once expanded."""
    lines = ["name: bomb", "dataset: digits", "model: mlp", "description:", '  l0: &l0 ["lol", "lol"]']
    lines += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_refused_at_once_naming_the_limit(tmp_path, monkeypatch):
    """Nine levels of aliases hung the loader (issue 32, item 3); a task file that expands past the limit is
    refused before anything walks it, and the message says how to raise the limit."""
    path = tmp_path / "bomb.yaml"
    path.write_text(billion_laughs(9))
    with pytest.raises(ConfigError, match="at most 200,000 values with YAML aliases expanded.*FEDBENCH_MAX_TASK_NODES"):
        load_task(str(path))
    path.write_text(billion_laughs(2))  # 2 + 9*... a few hundred values: an ordinary use of aliases
    assert load_task(str(path)).name == "bomb"
    monkeypatch.setenv("FEDBENCH_MAX_TASK_NODES", "50")
    with pytest.raises(ConfigError, match="at most 50 values"):
        load_task(str(path))
    with pytest.raises(ConfigError, match="at most 50 values") as err:  # a --set value is counted too
        load_task(
            write_task(tmp_path, {**{k: v for k, v in TINY.items() if k != "task"}, "name": "t"}),
            ["description=" + str(list(range(60)))],
        )
    assert err.value.field == "--set"


def test_a_recursive_alias_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("name: loop\ndataset: digits\nmodel: mlp\ndescription: &a [1, *a]\n")
    with pytest.raises(ConfigError, match="a recursive YAML alias"):
        load_task(str(path))


def test_a_grid_past_max_runs_is_refused_before_any_run_is_built(tmp_path):
    """A 300 x 300 grid hung `--dry-run` validating 90,000 runs (issue 32, item 3): the count comes from the axes'
    lengths, and `max_runs` raises the limit."""
    from fedbench.config.task import task_from_dict

    body = {
        **{k: v for k, v in TINY.items() if k != "task"},
        "name": "big",
        "seeds": [0, 1],
        "grid": {"optimizer.lr": [0.001 * (i + 1) for i in range(300)], "local_epochs": list(range(1, 301))},
    }
    with pytest.raises(ConfigError, match=r"180,000 runs \(300 x 300 points x 2 seeds\).*max_runs: 180000") as err:
        task_from_dict(body)
    assert err.value.field == "grid"
    small = {**body, "grid": {"optimizer.lr": [0.01, 0.02, 0.03]}, "max_runs": 5}
    with pytest.raises(ConfigError, match="at most 5 runs"):
        task_from_dict(small)
    assert len(task_from_dict(small, ["max_runs=6"]).expand()) == 6
    with pytest.raises(ConfigError, match="max_runs: got 0"):
        task_from_dict({**small, "max_runs": 0})


def test_a_missing_model_is_named_not_a_traceback():
    from fedbench.config.task import task_from_dict

    with pytest.raises(ConfigError, match="model: got None; allowed: a value is required"):
        task_from_dict({"name": "t", "dataset": "digits"})


@pytest.mark.parametrize(
    "override, field",
    [
        ("scenario={partition: dirichlet, alpha: .nan, num_clients: 4}", "scenario.alpha"),
        ("scenario={partition: dirichlet, alpha: .inf, num_clients: 4}", "scenario.alpha"),
        ("algorithm={name: fedprox, mu: .nan}", "algorithm.mu"),
        ("algorithm={name: feroma, epsilon: .inf}", "algorithm.epsilon"),
        ("normalize={mode: values, mean: [.nan], std: [1]}", "normalize.mean[0]"),
        ("optimizer.lr=1e309", "optimizer.lr"),
        ("dataset={name: digits, test_fraction: .nan}", "dataset.test_fraction"),
    ],
)
def test_no_numeric_field_takes_nan_or_infinity(override, field):
    """NaN passes every `<`/`>` range check (`alpha: .nan` failed mid-run blaming min_samples; issue 32, item 4):
    every number is refused at load unless finite."""
    from fedbench.config.task import task_from_dict

    with pytest.raises(ConfigError, match="a finite number") as err:
        task_from_dict({**{k: v for k, v in TINY.items() if k != "task"}, "name": "t"}, [override]).expand()
    assert err.value.field == field


@pytest.mark.parametrize(
    "hidden, hint",
    [([-5], "a list of positive integers"), ([10**9], r"fit in this machine's memory .* 75,000,000,010 parameters")],
)
def test_a_model_that_cannot_be_built_is_refused_at_load(hidden, hint):
    """`hidden: [-5]` failed on the workers and `hidden: [1e9]` (a 280 GiB layer) was accepted (issue 32, item 4)."""
    from fedbench.config.task import task_from_dict

    with pytest.raises(ConfigError, match=hint):
        task_from_dict(
            {**{k: v for k, v in TINY.items() if k != "task"}, "name": "t", "model": {"name": "mlp", "hidden": hidden}}
        )
    assert task_from_dict(
        {**{k: v for k, v in TINY.items() if k != "task"}, "name": "t", "model": {"name": "mlp", "hidden": []}}
    ).expand()  # logistic regression: a real model
