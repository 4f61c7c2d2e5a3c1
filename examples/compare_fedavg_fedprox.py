"""FedAvg against FedProx on digits under label skew, two seeds, as you would write it in a notebook:
a task built in Python, run with `fedbench.run`, ranked with `fedbench.leaderboard`.

    python examples/compare_fedavg_fedprox.py      # about a minute on 2 CPU cores
"""

import fedbench

TASK = {
    "name": "compare_fedavg_fedprox",  # the MLflow experiment the runs go to
    "dataset": "digits",  # bundled with scikit-learn: no download
    "model": {"name": "mlp", "hidden": [32]},
    "scenario": {"partition": "dirichlet", "alpha": 0.3, "num_clients": 4},
    "rounds": 3,
    "local_epochs": 1,
    "batch_size": 32,
    "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
    "grid": {"algorithm": ["fedavg", {"name": "fedprox", "mu": 0.1}]},
    "seeds": [0, 1],
}

if __name__ == "__main__":
    results = fedbench.run(TASK, backend="serial")
    print(f"{sum(r.status == 'FINISHED' for r in results)} of {len(results)} runs finished")
    board = fedbench.leaderboard(TASK["name"], group_by="dataset")
    print(board[["rank", "configuration", "mean", "std", "n"]].to_string(index=False))
