"""Running a RunSpec: the round loop, client workers (serial or Ray actors), state store, byte meter."""

from fedbench.runtime.federation import Federation, run_spec

__all__ = ["Federation", "run_spec"]
