"""Running a RunSpec: the round loop, client workers (serial or Ray actors), state store, byte meter.

`Federation` and `run_spec` are imported on first use, so that a light module of this package (such as
`ray_resources`, which a sweep's plan checks resources with) loads without the round loop and torch.
"""

from __future__ import annotations

from fedbench.core.lazy import lazy_exports

__all__ = ["Federation", "run_spec"]
__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "fedbench.runtime.federation"))
