"""Task files to RunSpecs: what to run, validated at the boundary (the RunSpec type itself is in core)."""

from fedbench.config.task import TaskSpec, load_task, parse_override

__all__ = ["TaskSpec", "load_task", "parse_override"]
