"""A failed run's reason is one line naming the job's own exception, wherever the job ran."""

import ray

from fedbench.core.errors import ClientDivergedError
from fedbench.runtime.failures import failure_reason, failure_traceback

REMOTE = (
    "\x1b[36mray::ClientWorker.fit()\x1b[39m (pid=1, ip=10.0.0.1)\n  File \"worker.py\", line 89, in fit\n"
    "fedbench.core.errors.ClientDivergedError: client 2: training loss became nan in round 1\n"
)


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_a_ray_task_error_is_reported_by_its_cause_on_one_line_without_colour_codes():
    cause = ClientDivergedError("client 2: training loss became nan in round 1")
    wrapped = raised(ray.exceptions.RayTaskError("ClientWorker.fit", REMOTE, cause).as_instanceof_cause())
    assert "\x1b[" in str(wrapped)  # what used to become the failure_reason tag
    assert failure_reason(wrapped) == "ClientDivergedError: client 2: training loss became nan in round 1"
    trace = failure_traceback(wrapped)
    assert "ray::ClientWorker.fit()" in trace and 'File "worker.py", line 89' in trace and "\x1b" not in trace


def test_an_exception_raised_in_process_keeps_its_type_and_message():
    assert failure_reason(raised(ValueError("bad value\n  on two lines"))) == "ValueError: bad value on two lines"
