"""Running a RunSpec: the round loop, client workers (serial or Ray actors), state store, byte meter.

`Federation` and `run_spec` are imported on first use, so that a light module of this package (such as
`ray_resources`, which a sweep's plan checks resources with) loads without the round loop and torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Federation", "run_spec"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from fedbench.runtime import federation

        return getattr(federation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
