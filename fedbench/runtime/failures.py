"""How a failed run says why: one line naming the exception a client job raised, and its traceback as plain text.

On the ray backend an exception raised in a worker reaches the driver wrapped in a `RayTaskError`, whose
message is the whole remote traceback with terminal colour codes; written as the run's `failure_reason` it
would fill the tag with escape codes. The worker's own exception is kept as the error's `cause`, so the
reason names that, as the serial backend does, and the traceback keeps the rest.
"""

from __future__ import annotations

import re
import sys
import traceback

ANSI_CODES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def failure_reason(exc: BaseException) -> str:
    """`Type: message` of the exception a job raised, on one line (a Ray wrapper's cause, not the wrapper)."""
    cause = job_exception(exc)
    return " ".join(ANSI_CODES.sub("", f"{type(cause).__name__}: {cause}").split())


def failure_traceback(exc: BaseException) -> str:
    """The traceback of `exc` (and, for a Ray wrapper, the worker's, which its message carries), uncoloured."""
    return ANSI_CODES.sub("", "".join(traceback.format_exception(exc)))


def job_exception(exc: BaseException) -> BaseException:
    """The exception a client job raised: the cause a Ray task error wraps, else `exc` itself."""
    ray = sys.modules.get("ray")  # an error from a Ray worker exists only where Ray was imported
    while ray is not None and isinstance(exc, ray.exceptions.RayTaskError) and isinstance(exc.cause, BaseException):
        exc = exc.cause
    return exc
