"""Hand-written FedAvg on Ray actors: the baseline bench/cli_overhead.py measures `fedbench run` against.

What a competent user writes without a platform: torchvision's MNIST (download=False), a plain LeNet-5, two Ray
actors with one torch thread each, the global weights `ray.put` once per round as numpy, the clients split
between the actors, sample-weighted averaging, every client evaluated on its local test split every round. The
federation (each client's training and test rows into MNIST's 60,000 + 10,000 images, train rows first) comes
from an .npz that bench/cli_overhead.py writes with fedbench's scenario generator before timing; this script
never imports fedbench. It writes the same start-up marks as fedbench (env FEDBENCH_TIMELINE) with its own
few lines (a `job` mark with seconds, CPU seconds and page faults at each job's end, `first_step` when training
first starts), and prints its final mean local accuracy.

    python bench/handwritten_fedavg.py --root TORCHVISION_ROOT --partition partition.npz [--rounds 5 --epochs 2]
"""

import argparse
import json
import os
import resource
import time

import numpy as np
import ray
import torch
import torch.nn.functional as F
import torchvision
from torch import nn


def mark(phase, **facts):
    """One JSON line per phase reached (and per job ended, with its seconds), as fedbench.core.timeline writes them."""
    if os.environ.get("FEDBENCH_TIMELINE"):
        with open(os.environ["FEDBENCH_TIMELINE"], "a") as file:
            file.write(json.dumps({"phase": phase, "t": time.time(), "pid": os.getpid(), **facts}) + "\n")


def page_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def job_mark(kind, began, cpu_began, faults_began):
    mark(
        "job",
        kind=kind,
        seconds=time.perf_counter() - began,
        cpu_s=time.process_time() - cpu_began,
        page_faults=page_faults() - faults_began,
    )


MEAN, STD = 0.1307, 0.3081


def lenet5():
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(400, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, 10),
    )


@ray.remote(num_cpus=1)
class Trainer:
    def __init__(self, images, labels, parts, args):
        torch.set_num_threads(1)
        self.images, self.labels, self.parts, self.args = images, labels, parts, args
        self.model = lenet5()
        self.started = False

    def ready(self):
        return True

    def batch(self, rows):
        x = torch.from_numpy(self.images[rows]).float().div_(255).sub_(MEAN).div_(STD).unsqueeze(1)
        return x, torch.from_numpy(self.labels[rows])

    def load(self, weights):
        self.model.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})

    def fit(self, weights, client, round):
        first = not self.started
        if first:
            self.started = True
            mark("job_start")
        began, cpu_began, faults_began = time.perf_counter(), time.process_time(), page_faults()
        self.load(weights)
        torch.manual_seed(1000 * round + client)
        rows = self.parts[f"train_{client}"]
        opt = torch.optim.SGD(self.model.parameters(), lr=self.args.lr, momentum=self.args.momentum)
        if first:  # torch's first optimizer imports torch._dynamo (seconds): training starts after it
            mark("first_step")
        self.model.train()
        for _ in range(self.args.epochs):
            order = rows[torch.randperm(len(rows)).numpy()]
            for start in range(0, len(order), self.args.batch):
                x, y = self.batch(order[start : start + self.args.batch])
                opt.zero_grad()
                F.cross_entropy(self.model(x), y).backward()
                opt.step()
        update = {k: v.detach().numpy().copy() for k, v in self.model.state_dict().items()}
        job_mark("fit", began, cpu_began, faults_began)
        return update, len(rows)

    @torch.no_grad()
    def evaluate(self, weights, client):
        began, cpu_began, faults_began = time.perf_counter(), time.process_time(), page_faults()
        self.load(weights)
        self.model.eval()
        rows = self.parts[f"test_{client}"]
        correct = 0
        for start in range(0, len(rows), 256):
            x, y = self.batch(rows[start : start + 256])
            correct += int((self.model(x).argmax(1) == y).sum())
        job_mark("evaluate", began, cpu_began, faults_began)
        return correct / len(rows)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--partition", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--actors", type=int, default=2)
    args = parser.parse_args()
    mark("cli_entered")

    ray.init(include_dashboard=False)
    mark("ray_started")
    train = torchvision.datasets.MNIST(args.root, train=True, download=False)
    test = torchvision.datasets.MNIST(args.root, train=False, download=False)
    images = np.concatenate([train.data.numpy(), test.data.numpy()])
    labels = np.concatenate([train.targets.numpy(), test.targets.numpy()]).astype(np.int64)
    parts = dict(np.load(args.partition))
    clients = len([k for k in parts if k.startswith("train_")])
    mark("dataset_loaded")

    images_ref, labels_ref, parts_ref = ray.put(images), ray.put(labels), ray.put(parts)
    actors = [Trainer.remote(images_ref, labels_ref, parts_ref, args) for _ in range(args.actors)]
    ray.get([a.ready.remote() for a in actors])
    mark("workers_loaded")

    torch.manual_seed(0)
    weights = {k: v.numpy().copy() for k, v in lenet5().state_dict().items()}
    for round in range(1, args.rounds + 1):
        ref = ray.put(weights)
        updates = ray.get([actors[c % len(actors)].fit.remote(ref, c, round) for c in range(clients)])
        total = sum(n for _, n in updates)
        weights = {k: sum(w[k] * (n / total) for w, n in updates).astype(np.float32) for k in weights}
        ref = ray.put(weights)
        accuracy = ray.get([actors[c % len(actors)].evaluate.remote(ref, c) for c in range(clients)])
        print(f"round {round}: mean local accuracy {np.mean(accuracy):.4f}", flush=True)
        mark("round_end")
    mark("run_end")
    print(f"final mean accuracy: {np.mean(accuracy):.4f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
