"""Pool cost: fedbench's 2 x 2 max pooling (fedbench/models/pooling.py) against torch's, in each CNN it builds.

For every model with 2 x 2 max pooling it builds a twin with torch's `nn.MaxPool2d(2)` in those places (same
weights) and times, side by side, step by step, alternating which goes first:
  (train) a training step: forward, cross-entropy, backward, SGD step (momentum 0.9), batch 64;
  (eval) a forward pass without gradients, batch 256 (a client's evaluation).
Then it checks that the twins' weights after the timed training steps are equal (an end-to-end check; the tie
rule itself is tests/models/test_pooling.py's). Inputs are synthetic images with a blank border, as MNIST's
have. One torch thread, as a client job gets. Times are medians over `--repeats`; the ratio is
fedbench's over torch's (below 1: faster).

    python bench/pool_cost.py [--steps 10] [--repeats 3]

Writes bench/results/pool_cost.md and .json.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import time
from datetime import datetime, timezone

import torch
import torch.nn.functional as F
from tables import RESULTS, markdown_table
from torch import nn

from fedbench.models import build_model
from fedbench.models.pooling import MaxPool2x2

MODELS = {  # name: (input shape, options)
    "lenet5": ((1, 28, 28), {}),
    "cnn_mnist": ((1, 28, 28), {}),
    "feddrm_net (cnn backbone)": ((1, 28, 28), {"backbone": "cnn", "num_clients": 10}),
    "cnn_cifar": ((3, 32, 32), {}),
    "resnet9": ((3, 32, 32), {}),
}


def with_torchs_pooling(model: nn.Module) -> nn.Module:
    """A copy of `model` (same weights) with torch's nn.MaxPool2d(2) wherever it has MaxPool2x2."""
    twin = copy.deepcopy(model)
    for module in twin.modules():
        for name, child in module.named_children():
            if isinstance(child, MaxPool2x2):
                setattr(module, name, nn.MaxPool2d(2))
    assert not any(isinstance(m, MaxPool2x2) for m in twin.modules())
    return twin


def images(n: int, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """[n, *shape] in [0, 1]: random pixels inside a blank border of a sixth of each side."""
    x = torch.zeros(n, *shape)
    h, w = shape[-2:]
    x[..., h // 6 : h - h // 6, w // 6 : w - w // 6] = torch.rand(n, shape[0], h - 2 * (h // 6), w - 2 * (w // 6),
                                                                  generator=generator)
    return x


def timed(call) -> float:
    start = time.process_time()
    call()
    return time.process_time() - start


def alternating(steps: int):
    """(step, twin) pairs, both twins each step, the one going first alternating: neither always runs on a cache
    the other warmed."""
    for step in range(steps):
        for kind in ("fedbench", "torch") if step % 2 == 0 else ("torch", "fedbench"):
            yield step, kind


def measure(name: str, steps: int, repeat: int) -> dict:
    """One repeat for one model: mean CPU seconds of a training step and of an evaluation pass, each way."""
    shape, options = MODELS[name]
    torch.manual_seed(repeat)
    fast = build_model(name.split(" ")[0], shape, 10, **options)
    twins = {"fedbench": fast, "torch": with_torchs_pooling(fast)}
    optimizers = {k: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for k, m in twins.items()}
    generator = torch.Generator().manual_seed(repeat)
    train_x, train_y = images(64 * steps, shape, generator), torch.randint(0, 10, (64 * steps,), generator=generator)
    test_x = images(256, shape, generator)

    def train_step(kind: str, rows: slice) -> None:
        model, optimizer = twins[kind], optimizers[kind]
        optimizer.zero_grad()
        F.cross_entropy(model(train_x[rows]), train_y[rows]).backward()
        optimizer.step()

    @torch.no_grad()
    def evaluate(kind: str) -> None:
        twins[kind](test_x)

    seconds = {f"{part}_{kind}": 0.0 for part in ("train", "eval") for kind in twins}
    for kind in twins:  # warm-up, untimed: torch's first calls build kernels and the optimizer's state
        train_step(kind, slice(0, 64))
        twins[kind].eval()
        evaluate(kind)
        twins[kind].train()
    for step, kind in alternating(steps):
        seconds[f"train_{kind}"] += timed(lambda: train_step(kind, slice(64 * step, 64 * step + 64)))
    same = all(torch.equal(a, b) for a, b in zip(twins["fedbench"].state_dict().values(),
                                                 twins["torch"].state_dict().values()))
    for model in twins.values():
        model.eval()
    for _, kind in alternating(steps):
        seconds[f"eval_{kind}"] += timed(lambda: evaluate(kind))
    return {**{k: v / steps for k, v in seconds.items()}, "same_weights": same}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="timed training steps and evaluation passes per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="", help="only the models whose name contains this text")
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = [name for name in MODELS if args.only in name]
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for repeat in range(args.repeats):
        for name in names:
            runs[name].append(measure(name, args.steps, repeat))
            last = {k: v * 1e3 for k, v in runs[name][-1].items() if k != "same_weights"}
            print(f"#{repeat + 1} {name:26s} train {last['train_fedbench']:7.2f} vs {last['train_torch']:7.2f} ms"
                  f"  eval {last['eval_fedbench']:7.2f} vs {last['eval_torch']:7.2f} ms", flush=True)

    def cells(name: str, part: str) -> list[str]:
        """torch's ms, fedbench's ms and their ratio for `part` (train or eval): medians over the repeats."""
        fast, torchs = (statistics.median(run[f"{part}_{kind}"] for run in runs[name]) for kind in ("fedbench", "torch"))
        return [f"{torchs * 1e3:.2f}", f"{fast * 1e3:.2f}", f"{fast / torchs:.2f}x"]

    rows = [(name, *cells(name, "train"), *cells(name, "eval"),
             "yes" if all(run["same_weights"] for run in runs[name]) else "NO") for name in names]
    meta = {"date": datetime.now(timezone.utc).isoformat(timespec="minutes"), "torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "machine": platform.processor() or platform.machine(), "args": vars(args)}
    table = markdown_table(["model", "train step, torch's pool ms", "fedbench's ms", "ratio",
                            "eval pass, torch's pool ms", "fedbench's ms", "ratio", "same weights after training"], rows)
    lines = ["# pool_cost: fedbench's 2 x 2 max pooling against torch's, in each CNN", "",
             f"- date: {meta['date']}; torch {meta['torch']} ({meta['cpu_capability']}); 1 thread",
             f"- command: `python bench/pool_cost.py --steps {args.steps} --repeats {args.repeats}`",
             "- CPU seconds, medians over repeats of the mean per step; train: batch 64, forward + backward + SGD step;"
             " eval: batch 256, forward without gradients. Ratio: fedbench's over torch's.", "", *table, ""]
    print("\n".join(lines))
    if not args.only:
        (RESULTS / "pool_cost.md").write_text("\n".join(lines))
        (RESULTS / "pool_cost.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
