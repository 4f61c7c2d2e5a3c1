"""Several RunSpecs in a row: each with its own callbacks, a failed run does not stop the others."""

from fedbench.core.callbacks import Callback
from fedbench.runtime.session import run_specs
from tests.conftest import tiny_spec


class Ended(Callback):
    def __init__(self, position: int, seen: list):
        self.position, self.seen = position, seen

    def on_run_end(self, result) -> None:
        self.seen.append((self.position, result.spec.seed, result.status))


def test_runs_go_on_past_a_failed_run_each_with_the_callbacks_made_for_it():
    specs = [tiny_spec(seed=5, optimizer={"name": "sgd", "lr": 1e30}), tiny_spec(seed=0)]
    seen = []
    results = run_specs(specs, lambda i, spec: [Ended(i, seen)])
    assert [r.status for r in results] == ["FAILED", "FINISHED"]
    assert seen == [(1, 5, "FAILED"), (2, 0, "FINISHED")]
