"""Runs `examples/my_dataset_and_model.yaml`: FedAvg and local training on the example's own dataset
(`examples/my_dataset.py`) with its own model (`examples/my_model.py`), then prints the leaderboard.

    python -m examples.my_dataset_and_model
"""

from __future__ import annotations

from pathlib import Path

if __name__ == "__main__":
    import fedbench

    task = Path(__file__).with_suffix(".yaml")
    results = fedbench.run(task)
    print(f"{sum(r.status == 'FINISHED' for r in results)} of {len(results)} runs finished")
    board = fedbench.leaderboard(task)
    print(board[["rank", "configuration", "mean", "std", "n"]].to_string(index=False))
