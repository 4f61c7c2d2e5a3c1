"""Output paths: every path derived from a name stays inside its root."""

import pytest

from fedbench.core.errors import ConfigError
from fedbench.tracking.paths import inside, results_path, shown_uri


def test_a_name_leading_outside_the_root_is_refused(tmp_path):
    root = tmp_path / "results"
    for parts in [("plots", "../../x"), ("best", "/tmp/x.yaml"), ("..",)]:
        with pytest.raises(ConfigError) as err:
            inside(root, *parts)
        assert err.value.field == "output path" and str(root.resolve()) in err.value.allowed


def test_a_path_inside_the_root_is_resolved(isolated_results):
    assert (
        results_path("leaderboards", "quickstart.md") == isolated_results.resolve() / "leaderboards" / "quickstart.md"
    )
    assert results_path("plots", "a..b") == isolated_results.resolve() / "plots" / "a..b"


def test_a_report_names_a_store_under_the_working_directory_by_its_relative_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert shown_uri(f"sqlite:///{tmp_path}/results/mlflow.db") == "sqlite:///results/mlflow.db"
    assert shown_uri("sqlite:////elsewhere/mlflow.db") == "sqlite:////elsewhere/mlflow.db"  # outside: whole
    assert shown_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
