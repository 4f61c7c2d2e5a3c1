"""Reading and writing the tracking store while another process holds it, or while it is away.

Several fedbench processes share one sqlite store (two sweeps, a sweep and a leaderboard). sqlite lets one writer
in at a time; MLflow waits 20 s for a lock inside a session and about 8 s when it opens the store, then raises
`database is locked`, which would end a run (or a whole sweep) over a lock another process holds for a moment.
Every store call goes through `patiently`: a lock is waited out with backoff for up to `store_wait_s()`, then
fails with fedbench's own message naming the store. A full disk or a tracking server that stopped answering
(MLflow retries its requests for minutes first) stops the command with a `ResultsUnwritableError` naming it.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from fedbench.core.errors import ConfigError, FedbenchError, ResultsUnwritableError

log = logging.getLogger(__name__)
logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
"""MLflow logs a traceback for every database error before raising it; fedbench says what went wrong itself."""

T = TypeVar("T")

STORE_WAIT_ENV = "FEDBENCH_STORE_WAIT_S"
DEFAULT_STORE_WAIT_S = 300.0
"""How long a store call waits out a lock another process holds before failing (5 minutes: a sweep's parent run
writing its plots holds the store for seconds; a lock held for minutes is a stuck process)."""

MAX_BACKOFF_S = 10.0


class StoreLockedError(FedbenchError):
    """The tracking store stayed locked by another process for longer than fedbench waits."""

    def __init__(self, uri: str, waited_s: float, what: str):
        super().__init__(
            f"the tracking store {uri} stayed locked by another process for {waited_s:.0f} s while "
            f"{what}; is another process holding it in a transaction? Set {STORE_WAIT_ENV} to wait longer"
        )


class StoreUnwritableError(ResultsUnwritableError):
    """The tracking store cannot take another write: its disk is full or it is read-only."""

    def __init__(self, uri: str, reason: str, what: str):
        super().__init__(
            f"the tracking store {uri} cannot be written ({reason}) while {what}: free space on its disk, "
            "or point FEDBENCH_RESULTS or MLFLOW_TRACKING_URI elsewhere. The runs recorded so far are kept; "
            "the same command again runs only those that did not finish"
        )


class ServerGoneError(ResultsUnwritableError):
    """The tracking server stopped answering and did not come back while MLflow retried."""

    def __init__(self, uri: str, what: str):
        super().__init__(
            f"the tracking server {uri} stopped answering while {what}, and did not come back while MLflow "
            "retried (MLFLOW_HTTP_REQUEST_MAX_RETRIES); start it again and run the same command: the runs "
            "it recorded are kept, and only those that did not finish run again"
        )


def server_gone(exc: BaseException | None) -> bool:
    """Whether `exc` (MLflow's, around requests') says the tracking server could not be reached at all."""
    while exc is not None:
        if "Max retries exceeded" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


UNWRITABLE = {"database or disk is full": "the disk is full", "readonly database": "it is read-only"}
UNWRITABLE_ERRNO = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "it is on a read-only file system",
}


def unwritable_reason(exc: BaseException | None) -> str | None:
    """Why `exc` (or what caused it) says the store cannot be written, or None when it says something else."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in UNWRITABLE_ERRNO:
            return UNWRITABLE_ERRNO[exc.errno]
        for text, reason in UNWRITABLE.items():
            if text in str(exc):
                return reason
        exc = exc.__cause__ or exc.__context__
    return None


def store_wait_s() -> float:
    """`DEFAULT_STORE_WAIT_S`, or FEDBENCH_STORE_WAIT_S when set."""
    text = os.environ.get(STORE_WAIT_ENV, "")
    if not text:
        return DEFAULT_STORE_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise ConfigError(STORE_WAIT_ENV, text, "a number of seconds >= 0")
    return value


def is_locked(exc: BaseException) -> bool:
    """Whether `exc` (sqlite's, SQLAlchemy's, or MLflow's wrapping of either) says another connection holds the
    store."""
    while exc is not None:
        if "database is locked" in str(exc) or "database table is locked" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def patiently(call: Callable[[], T], uri: str, what: str) -> T:
    """`call()`, retried with backoff while the store at `uri` is locked, for up to `store_wait_s()`."""
    deadline = time.monotonic() + store_wait_s()
    start, delay, said = time.monotonic(), 0.25, False
    while True:
        try:
            return call()
        except Exception as exc:
            reason = unwritable_reason(exc)
            if reason is not None:
                raise StoreUnwritableError(uri, reason, what) from exc
            if uri.startswith(("http://", "https://")) and server_gone(exc):
                raise ServerGoneError(uri, what) from exc
            if not is_locked(exc):
                raise
            if time.monotonic() + delay > deadline:
                raise StoreLockedError(uri, time.monotonic() - start, what) from exc
            if not said:
                log.warning(
                    "the tracking store %s is locked by another process: waiting (up to %.0f s) while %s",
                    uri,
                    store_wait_s(),
                    what,
                )
                said = True
        time.sleep(delay)
        delay = min(delay * 2, MAX_BACKOFF_S)


class PatientClient:
    """An `MlflowClient` whose every call waits out a locked store (`patiently`)."""

    def __init__(self, uri: str):
        from mlflow.tracking import MlflowClient

        self._uri = uri
        self._client = patiently(lambda: MlflowClient(tracking_uri=uri), uri, "opening it")  # opening reads the schema

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if not callable(method):
            return method

        def call(*args, **kwargs):
            return patiently(lambda: method(*args, **kwargs), self._uri, f"calling MLflow's {name}")

        return call
