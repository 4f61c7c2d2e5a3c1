"""Registries find things from outside the package: `module:attribute` names and entry points."""

import pytest

from fedbench.config import parse_run
from fedbench.core.errors import ConfigError
from fedbench.core.registry import ALGORITHMS, MODELS, Registry
from tests.conftest import TINY


def test_a_module_attribute_name_imports_the_users_algorithm():
    from examples.my_algorithm import ServerLrFedAvg

    assert ALGORITHMS.get("examples.my_algorithm:ServerLrFedAvg") is ServerLrFedAvg
    spec = parse_run({**TINY, "algorithm": {"name": "examples.my_algorithm:ServerLrFedAvg", "server_lr": 0.5}})
    assert spec.algorithm.name == "examples.my_algorithm:ServerLrFedAvg"  # recorded as written
    assert spec.algorithm.kwargs["server_lr"] == 0.5


@pytest.mark.parametrize(
    "name, tried",
    [
        ("examples.no_such_module:X", "ModuleNotFoundError: No module named 'examples.no_such_module'"),
        ("examples.my_algorithm:Nope", "has no attribute 'Nope'"),
        ("examples.my_algorithm:server_step", "is a function, not a subclass of fedbench.algorithms.base.Algorithm"),
    ],
)
def test_a_bad_module_attribute_name_names_the_field_and_what_was_tried(name, tried):
    with pytest.raises(ConfigError) as error:
        parse_run({**TINY, "algorithm": name})
    message = str(error.value)
    assert message.startswith(f"algorithm.name: got {name!r}") and tried in message and "fedavg" in message


def test_a_model_from_outside_must_be_callable():
    with pytest.raises(ConfigError, match="model.name: .*is a float, not a callable"):
        MODELS.get("math:pi", field="model.name")


def test_entry_points_of_installed_packages_are_registered(tmp_path, monkeypatch):
    """A package declaring `[fedbench.algorithms]` in its entry_points.txt, as `pip install` leaves it."""
    (tmp_path / "my_plugin.py").write_text("from examples.my_algorithm import ServerLrFedAvg\n")
    dist = tmp_path / "my_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[fedbench.algorithms]\nserver_lr = my_plugin:ServerLrFedAvg\n"
        "broken = my_plugin:Missing\nfedavg = my_plugin:ServerLrFedAvg\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry("algorithm", "fedbench.algorithms", base="fedbench.algorithms.base:Algorithm")
    registry.register("fedavg")(object)

    assert {"server_lr", "broken", "fedavg"} <= set(registry.names())
    assert registry.get("server_lr").__name__ == "ServerLrFedAvg"
    assert registry.get("fedavg") is object  # a built-in name keeps its meaning
    with pytest.raises(ConfigError, match="algorithm.name: got 'broken'.*my_plugin:Missing failed: AttributeError"):
        registry.get("broken", field="algorithm.name")
    assert "broken" not in registry
