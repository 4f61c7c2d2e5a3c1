"""The backend registry: `resources.backend` names a registered backend (or a user's, by module:attribute), checked
before any run starts."""

import pytest

from fedbench.core.errors import ConfigError
from fedbench.core.registry import BACKENDS
from fedbench.runtime import run_spec
from fedbench.runtime.backends import backend_kind
from fedbench.runtime.backends.serial import SerialBackend
from tests.conftest import tiny_spec


class CountingSerial(SerialBackend):
    """A user's backend: the serial one, counting the jobs it ran."""

    jobs: list[str] = []

    def stream(self, job, round, payloads, store):  # `run` streams too
        CountingSerial.jobs.extend([job.name] * len(payloads))
        return super().stream(job, round, payloads, store)


def test_the_built_in_backends_are_registered_and_say_whether_they_need_ray():
    assert {"serial", "ray"} <= set(BACKENDS.names())
    assert not backend_kind("serial").uses_ray and backend_kind("ray").uses_ray


def test_an_unknown_backend_is_refused_naming_the_field_and_the_known_ones():
    with pytest.raises(ConfigError, match="known backends are .*ray.*serial") as err:
        tiny_spec(resources={"backend": "threads"})
    assert err.value.field == "resources.backend"


def test_a_users_backend_is_found_by_module_attribute_and_runs_the_rounds():
    CountingSerial.jobs.clear()
    spec = tiny_spec(rounds=2, resources={"backend": "tests.runtime.test_backends:CountingSerial"})
    result = run_spec(spec)
    assert result.status == "FINISHED", result.reason
    assert CountingSerial.jobs.count("fit") == 2 * spec.scenario.num_clients
    assert result.history[-1]["acc_local_mean"] == run_spec(tiny_spec(rounds=2)).history[-1]["acc_local_mean"]
