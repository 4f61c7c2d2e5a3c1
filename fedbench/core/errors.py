"""The errors fedbench raises for bad input, each naming what was wrong and what is allowed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class FedbenchError(Exception):
    """Base of every error fedbench raises on purpose."""


class IgnoredSettingWarning(UserWarning):
    """A run setting its method does not use (pFedMe's plain gradient steps take no momentum). Said where a task runs
    that method alone; a task whose grid shares one setting among several methods chose it for the others, and is not
    warned (`TaskSpec.expand`)."""


class DegenerateRunWarning(UserWarning):
    """A run that trains, but is not what its method is for (a warm-up lasting the whole run makes FEROMA FedAvg): a
    warning in a task, refused where a search space's range would sample it. `field` (the dotted path at fault) lets
    that refusal name the parameter, not whichever one was being probed."""

    def __init__(self, field: str, message: str):
        super().__init__(field, message)
        self.field = field

    def __str__(self) -> str:
        return f"{self.field}: {self.args[1]}"


class ResultsUnwritableError(FedbenchError):
    """Nothing more can be recorded (a full disk, a read-only store): raised by a callback, it stops the command
    instead of failing every later run the same way. The runs recorded so far are kept."""


class ConfigError(FedbenchError, ValueError):
    """A task, RunSpec field or CLI override has a value that is not allowed.

    The message always carries the field's dotted path, the offending value and what is allowed, so a
    user can fix the task file without reading fedbench's code.
    """

    def __init__(self, field: str, value: Any, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}: got {value!r}; allowed: {allowed}")

    def under(self, prefix: str) -> ConfigError:
        """The same error with `prefix` (the path of the section that holds the field) put in front.

        A type checks its own fields and names them relative to itself (`sigma`); the parser, which knows
        where the section sits in the task (`scenario.shifts[1]`), fills in the path on the way up.
        """
        if not prefix:
            return self
        field = f"{prefix}{self.field}" if self.field.startswith("[") else f"{prefix}.{self.field}"
        error = ConfigError(field, self.value, self.allowed)
        error.__cause__ = self.__cause__
        return error


class UnknownNameError(ConfigError):
    """A dataset, model, algorithm or partition name that no registry knows."""

    def __init__(self, kind: str, name: Any, known: Iterable[str], field: str | None = None):
        self.kind = kind
        known = sorted(known)
        super().__init__(field or kind, name, f"known {kind}s are {', '.join(known)}")


class DataMissingError(FedbenchError, FileNotFoundError):
    """Dataset files are not where fedbench looked, and they could not be downloaded."""


class DataCorruptError(FedbenchError, ValueError):
    """A dataset file is there but does not hold what it should (truncated, not gzip, a label outside the
    classes). Raised while the dataset loads, before any training, with the file and what is wrong in the
    message: otherwise it surfaces rounds later as a nameless EOFError or an out-of-bounds target."""


class ClientDivergedError(FedbenchError, FloatingPointError):
    """A client's training loss became NaN or infinite: the run cannot go on and is marked failed."""


class WorkerLostError(FedbenchError):
    """A client job whose worker process died on every attempt (see `runtime.ray_pool.JOB_ATTEMPTS`): the run
    fails, since the job itself is what kills its workers (e.g. runs out of memory)."""
