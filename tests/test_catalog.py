"""`fedbench list` reads fedbench's own entries from a cache named by a digest of the sources and the declared
entry points; entries of installed packages are read live. Either way it shows what the registries hold."""

import json
import os
import subprocess
import sys

import pytest

from examples.my_algorithm import ServerLrFedAvg
from fedbench import catalog
from fedbench.algorithms.capabilities import capabilities_of
from fedbench.algorithms.fedavg import FedAvg
from fedbench.core.cache import cache_dir
from fedbench.scenarios.presets import PRESETS


def live(kind: str) -> list[catalog.Listed]:
    """Every entry of `kind` as the registry and its sources give it now, without the cache."""
    registry = catalog.KINDS[kind].registry
    abilities = (lambda entry: tuple(capabilities_of(entry))) if kind == "algorithms" else (lambda entry: ())
    return [
        catalog.Listed(
            name,
            catalog.summary(registry.get(name)),
            tuple(catalog.parameters(kind, name)),
            abilities(registry.get(name)),
            getattr(getattr(registry.get(name), "data_files", None), "layouts", ()),  # a dataset's files
            set_through=catalog.KINDS[kind].set_through,
        )
        for name in registry.names()
    ]


def test_the_cached_listing_is_what_the_registries_hold():
    built = catalog.load()  # no cache file yet: built from the registries, written
    files = list((cache_dir() / "catalog").glob("*.json"))
    assert len(files) == 1
    read = catalog.load()  # read back from that file
    for kind in catalog.KINDS:
        assert read.entries(kind) == built.entries(kind) == live(kind), kind
    assert read.entry("algorithms", "feroma") == next(e for e in live("algorithms") if e.name == "feroma")
    assert read.presets == [(name, catalog.summary(fn)) for name, fn in sorted(PRESETS.items())]


def test_a_broken_cache_file_is_built_again():
    first = catalog.load()
    (path,) = (cache_dir() / "catalog").glob("*.json")
    path.write_text('{"kinds": ')
    assert catalog.load() == first
    assert path.read_text().startswith('{"kinds": {')


@pytest.mark.slow
def test_an_installed_packages_entry_is_listed_live_and_installing_one_rebuilds_the_cache(tmp_path):
    """A package declaring `[fedbench.algorithms]` entry points, as `pip install` leaves it: its entry is listed
    with its own docstring and parameters; a built-in name it also declares keeps the built-in's listing; and once
    it is gone, a `list` with the same cache folder no longer shows it."""
    plugin = tmp_path / "plugin"
    dist = plugin / "my_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (plugin / "my_plugin.py").write_text("from examples.my_algorithm import ServerLrFedAvg\n")
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[fedbench.algorithms]\nserver_lr = my_plugin:ServerLrFedAvg\nfedavg = my_plugin:ServerLrFedAvg\n"
    )

    def algorithms(extra_path=""):
        """{name: (summary, parameter names)} of `catalog.load()` in a fresh process, as `fedbench list` reads it."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (extra_path, os.getcwd()) if p)}
        proc = subprocess.run(
            [sys.executable, "-c", LIST_ALGORITHMS], capture_output=True, text=True, env=env, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        return {name: (text, params) for name, text, params in json.loads(proc.stdout)}

    with_plugin = algorithms(extra_path=str(plugin))
    assert with_plugin["server_lr"] == (catalog.summary(ServerLrFedAvg), ["client_fraction", "server_lr"])
    assert with_plugin["fedavg"][0] == catalog.summary(FedAvg)  # a built-in name keeps its meaning
    without = algorithms()
    assert "server_lr" not in without and without["fedavg"] == with_plugin["fedavg"]
    assert len(list((cache_dir() / "catalog").glob("*.json"))) == 1  # the other digest's file was dropped


LIST_ALGORITHMS = """
import json
from fedbench import catalog
print(json.dumps([[e.name, e.summary, [p.name for p in e.parameters]] for e in catalog.load().entries("algorithms")]))
"""


def test_backends_are_listed_as_methods_are_and_fedprox_says_it_trains_in_a_pass():
    from fedbench.catalog import load

    catalog = load()
    assert {e.name for e in catalog.entries("backends")} >= {"serial", "ray", "batched", "auto"}
    assert all(not e.parameters for e in catalog.entries("backends"))  # set through `resources`
    from fedbench import api

    [batched] = api.listing("backends", "batched")["backends"]
    assert batched.set_through.startswith("resources")  # `list` says where, instead of "no parameters"
    assert not any(e.set_through for e in api.listing("shifts")["shifts"])
    assert "FunctionalFit" in catalog.entry("algorithms", "fedprox").capabilities
    assert "FunctionalFit" not in catalog.entry("algorithms", "moon").capabilities  # its own client_update
