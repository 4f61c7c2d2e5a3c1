"""Task files to RunSpecs: what to run, validated at the boundary (the RunSpec type itself is in core)."""

from fedbench.config.parse import parse_dataset, parse_run, parse_spec
from fedbench.config.task import TaskSpec, load_task, parse_override, resolve_run

__all__ = ["TaskSpec", "load_task", "parse_dataset", "parse_override", "parse_run", "parse_spec", "resolve_run"]
