"""Transform cost: what a client's feature transform adds to a local epoch, per kind of transform.

Scenarios store no transformed images: every batch is transformed on the worker when it is formed
(`fedbench.scenarios.transforms.BatchTransform`), so the transform must stay cheap next to training. On
MNIST-sized synthetic data (uint8 [N, 1, 28, 28], 10 classes; one extra case on RGB data of that size, where
FedDRM's photometric shift does its full work: on gray data saturation and hue are the identity and are
skipped) it times, for each descriptor,
  (t) applying the BatchTransform alone to one epoch's batches (already gathered), and
  (e) one local epoch of LeNet-5 with that transform in the loop (gather, transform, forward, backward,
      SGD step; batch 64, lr 0.005, momentum 0.9, 1 torch thread),
and prints t, e and t/e. Target: t/e <= 10% for every descriptor. These machines' speed drifts by tens of
percent from minute to minute (CPU steal, other jobs), so t and e are taken batch by batch side by side,
the descriptors run interleaved, `--repeats` times, and the best of each is compared. Every op does its
work whatever the pixel values, so synthetic data gives representative times.

    python bench/transform_cost.py [--samples 6000] [--repeats 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from fedbench.models import build_model
from fedbench.scenarios.transforms import BatchTransform, Canvas, Colour, Noise, Op, Photometric, Rotate, describe_ops
from fedbench.tracking.paths import results_dir

TARGET = 0.10
"""Transform time as a fraction of a local epoch's time, at most."""

ANDA_TARGETED = tuple(range(8))  # FEROMA's P(X|Y): 8 of 10 classes get the pattern (002 I.2)
PHOTOMETRIC = Photometric(gamma=0.6, hue=-0.1, saturation=1.5)  # one of FedDRM's 8 (004 Sec. 5)

CASES: dict[str, tuple[tuple[Op, ...], int, int]] = {
    # name: (descriptor, the scenario's channels, the data's channels)
    "identity (to_float_batch only)": ((), 1, 1),
    "rotate 90 + colour": ((Rotate(90.0), Colour(0)), 3, 1),
    "rotate 45": ((Rotate(45.0),), 1, 1),
    "noise 0.25": ((Noise(0.25),), 1, 1),
    "photometric, gray data": ((PHOTOMETRIC,), 3, 1),
    "photometric, RGB data": ((PHOTOMETRIC,), 3, 3),
    "class-cond. rotate 90 + colour": ((Rotate(270.0, classes=ANDA_TARGETED), Colour(2, classes=ANDA_TARGETED)), 3, 1),
    "class-cond. rotate 45": ((Rotate(45.0, classes=ANDA_TARGETED),), 1, 1),
}


def epoch(
    transform: BatchTransform, channels: int, x: torch.Tensor, y: torch.Tensor, batch: int, seed: int
) -> tuple[float, float]:
    """One local epoch as a client runs it (gather rows, transform, forward, backward, step), and the
    transform alone on the same batches; returns (transform seconds, epoch seconds).

    The two are measured batch by batch, side by side (the transform alone on a batch, then the training
    step on it), so that both see the same machine speed even when it drifts within a run.
    """
    model = build_model("lenet5", (channels, 28, 28), 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.005, momentum=0.9)
    model.train()
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    alone = steps = 0.0
    for s in range(0, len(y), batch):
        idx = order[s : s + batch]
        xb, yb = x[idx], y[idx]
        start = time.perf_counter()
        transform(xb, yb)
        alone += time.perf_counter() - start
        start = time.perf_counter()
        loss = F.cross_entropy(model(transform(x[idx], y[idx])), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += time.perf_counter() - start
    return alone, steps


def _short(text: str, width: int = 36) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=6000, help="samples of the client's local epoch")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repetitions over all descriptors")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a client job gets one CPU)")
    parser.add_argument("--only", default="", help="run only the descriptors whose name contains this text")
    args = parser.parse_args()
    cases = {name: case for name, case in CASES.items() if args.only in name}
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    data = {c: torch.randint(0, 256, (args.samples, c, 28, 28), dtype=torch.uint8) for c in (1, 3)}
    y = torch.randint(0, 10, (args.samples,), dtype=torch.int64)
    print(
        f"synthetic uint8 [{args.samples}, 1, 28, 28] (and [.., 3, ..] where marked RGB), 10 classes; "
        f"LeNet-5, batch {args.batch_size}, SGD lr 0.005 "
        f"momentum 0.9, {args.threads} thread(s); {args.repeats} interleaved repeats, best of each reported"
    )

    transforms = {}
    for name, (ops, channels, data_channels) in cases.items():
        for op in ops:
            op.check(Canvas(channels, (28, 28)))
        transforms[name] = BatchTransform(ops, channels)
        for _ in range(5):  # warm-up: grids, class tensors and constants are built on first use
            transforms[name](data[data_channels][: args.batch_size], y[: args.batch_size])
    runs: dict[str, dict[str, list[float]]] = {name: {"transform_s": [], "epoch_s": []} for name in cases}
    for repeat in range(args.repeats):
        for name, (_, channels, data_channels) in cases.items():
            t, e = epoch(transforms[name], channels, data[data_channels], y, args.batch_size, seed=repeat)
            runs[name]["transform_s"].append(t)
            runs[name]["epoch_s"].append(e)
            print(f"  #{repeat + 1} {name:32s} transform {t:7.4f} s  epoch {e:7.3f} s", flush=True)

    print(f"\n{'descriptor':32s} {'ops':36s} {'transform s':>11s} {'epoch s':>8s} {'ratio':>7s}  vs {TARGET:.0%}")
    summary = {}
    for name, (ops, channels, data_channels) in cases.items():
        t, e = min(runs[name]["transform_s"]), min(runs[name]["epoch_s"])
        ratio = t / e
        verdict = "PASS" if ratio <= TARGET else "FAIL"
        summary[name] = {
            "ops": [op.to_dict() for op in ops],
            "channels": channels,
            "data_channels": data_channels,
            "transform_s": t,
            "epoch_s": e,
            "ratio": ratio,
            "verdict": verdict,
        }
        print(f"{name:32s} {_short(describe_ops(ops)):36s} {t:11.4f} {e:8.3f} {ratio:7.2%}  {verdict}")
    out = results_dir() / "bench_transform_cost.json"
    out.write_text(json.dumps({"args": vars(args), "runs": runs, "best": summary}, indent=2))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
