import pytest
import yaml

from fedbench.config import load_task
from fedbench.core.errors import ConfigError
from tests.conftest import TINY

TABLE = {
    "title": "Accuracy",
    "source": "001 Table II, p. 7",
    "metric": "final.acc_local_mean",
    "scale": 100,
    "where": {"dataset": "digits"},
    "rows": ["algorithm"],
    "columns": "scenario.alpha",
    "cells": [
        {"algorithm": "fedavg", "scenario.alpha": 0.1, "value": 81.5},
        {"algorithm": "local", "scenario.alpha": 0.1, "value": None, "note": "not reported"},
    ],
}


def load(tmp_path, reference):
    body = {k: v for k, v in TINY.items() if k != "task"}
    body.update(name="t", grid={"algorithm": ["fedavg", "local"], "scenario.alpha": [0.1]}, reference=reference)
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(body))
    return load_task(path)


def test_a_reference_table_names_its_cells_by_dotted_fields_with_the_tables_filter(tmp_path):
    [table] = load(tmp_path, [TABLE]).reference
    assert (table.rows, table.columns, table.scale) == (("algorithm.name",), ("scenario.alpha",), 100.0)
    first, second = table.cells
    assert dict(first.where) == {"algorithm.name": "fedavg", "scenario.alpha": 0.1, "dataset.name": "digits"}
    assert first.value == 81.5 and second.value is None and second.note == "not reported"
    assert first.std is None  # the paper printed none


def test_a_cell_may_give_the_published_std_over_the_papers_seeds(tmp_path):
    cells = [{**TABLE["cells"][0], "std": 2.01}, TABLE["cells"][1]]
    [table] = load(tmp_path, [{**TABLE, "cells": cells, "seeds": 5}]).reference
    assert table.cells[0].std == 2.01 and table.cells[0].note == "" and table.cells[0].seeds == 5


@pytest.mark.parametrize(
    "change, field",
    [
        ({"rows": ["algoritm"]}, "reference[0].rows"),  # a typo
        ({"cells": [{"algorithm": "fedavg", "value": 1.0}]}, "reference[0].cells[0].scenario.alpha"),  # no column value
        ({"cells": [{"algorithm": "fedavg", "scenario.alpha": 0.1, "value": "high"}]}, "reference[0].cells[0].value"),
        ({"scale": 0}, "reference[0].scale"),
        ({"metric": ""}, "reference[0].metric"),
        ({"colour": "red"}, "reference[0].colour"),
        ({"cost": "dollars"}, "reference[0].cost"),
        (
            {"cells": [{"algorithm": "fedavg", "scenario.alpha": 0.1, "value": 81.5, "std": -1}]},
            "reference[0].cells[0].std",
        ),
        (
            {"cells": [{"algorithm": "fedavg", "scenario.alpha": 0.1, "value": 81.5, "std": "+- 2"}]},
            "reference[0].cells[0].std",
        ),
        ({"seeds": 0}, "reference[0].seeds"),
        ({"seeds": 2.5}, "reference[0].seeds"),
    ],
)
def test_a_bad_reference_is_refused_naming_the_entry(tmp_path, change, field):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, [{**TABLE, **change}])
    assert info.value.field == field


def test_a_reference_must_be_a_list_of_tables(tmp_path):
    with pytest.raises(ConfigError, match="a list of tables"):
        load(tmp_path, TABLE)


def test_a_table_may_name_a_leaderboard_cost_to_plot_beside_its_metric(tmp_path):
    from fedbench.config.reference import COSTS as PLOTTED
    from fedbench.tracking.leaderboard import COSTS

    [table] = load(tmp_path, [{**TABLE, "cost": "wall_s"}]).reference
    assert table.cost == "wall_s" and load(tmp_path, [TABLE]).reference[0].cost is None
    assert set(PLOTTED) == set(COSTS)  # the report reads each of them from the leaderboard's cost columns
