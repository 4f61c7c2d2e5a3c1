"""MLflow search filters, built in one place so that a value holding a quote still finds its runs.

MLflow's filter grammar strips a value's outer quotes and unescapes nothing inside (`'it''s'` looks for
`it''s`), so a value is put between the kind of quote it does not hold; one holding both kinds cannot be
written at all and is refused rather than silently matching nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from fedbench.core.errors import ConfigError


def where(conditions: Mapping[str, str | None]) -> str:
    """A `filter_string` for `search_runs`: every key (`tags.NAME`, `params.NAME`) equals its value, or is set
    at all where the value is None. Names are backquoted, since fedbench's tag names hold dots."""
    return " AND ".join(_clause(key, value) for key, value in conditions.items())


def _clause(key: str, value: str | None) -> str:
    entity, _, name = key.partition(".")
    identifier = f"{entity}.`{name}`"
    if value is None:
        return f"{identifier} LIKE '%'"
    for quote in ("'", '"'):
        if quote not in value:
            return f"{identifier} = {quote}{value}{quote}"
    raise ConfigError(key, value, "a value holding ' or \", not both: MLflow's search filters cannot quote it")
