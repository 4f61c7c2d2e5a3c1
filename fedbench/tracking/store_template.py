"""A new embedded MLflow store starts as a copy of an empty, migrated one.

MLflow builds a fresh sqlite store by running every schema migration (about a hundred alembic scripts): 1-2 s
on a quiet 2-core machine, up to a minute under load, and on the path of a user's first run in every new
results folder. The migrated, still empty database is the same file whatever its path, so it is made once
per MLflow version under `cache_dir()/mlflow/` and copied into place; MLflow then finds its tables and only
adds its default experiment, as it does for any store.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path

from fedbench.core.cache import cache_dir
from fedbench.tracking.paths import store_missing


def prepare_store(uri: str) -> None:
    """Give a sqlite store that does not exist yet its migrated tables from the template; other URIs (a
    tracking server, PostgreSQL) and existing stores are left alone. Two processes creating the same store
    end with one of the copies; where the template cannot be made, MLflow migrates the store itself."""
    if not store_missing(uri):
        return
    target = Path(uri.removeprefix("sqlite:///"))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = unique_sibling(target)
        shutil.copyfile(template(), partial)
        try:
            os.link(partial, target)  # atomic, and never over a store another process made meanwhile
        except FileExistsError:
            pass
        finally:
            partial.unlink(missing_ok=True)
    except Exception as exc:  # the template is only a shortcut: MLflow can always build the store itself
        warnings.warn(
            f"no MLflow store template ({type(exc).__name__}: {exc}); MLflow migrates {target} itself", stacklevel=2
        )


def template() -> Path:
    """The empty, migrated sqlite database of the installed MLflow, made on first use."""
    import mlflow
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables  # what SqlAlchemyStore runs on an empty database

    path = cache_dir() / "mlflow" / f"empty-store-{mlflow.__version__}.db"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = unique_sibling(path)
    engine = sqlalchemy.create_engine(f"sqlite:///{partial}")
    try:
        _initialize_tables(engine)
        engine.dispose()
        os.replace(partial, path)
    finally:
        engine.dispose()
        partial.unlink(missing_ok=True)
    return path


def unique_sibling(path: Path) -> Path:
    """A new empty file beside `path` that no other process or thread writes: where a copy is made before it is
    put in place in one step."""
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    os.close(handle)
    return Path(name)
