"""What the bench scripts share: markdown tables for their reports in bench/results/.

Scripts run as `python bench/<name>.py`, so this folder is on sys.path and `from tables import ...` works.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
"""Where every bench script writes its JSON and markdown."""


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A markdown table's lines: the header, its rule, then one line per row (each cell as str())."""
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(map(str, row)) + " |" for row in rows),
    ]
