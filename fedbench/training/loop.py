"""The one local-training loop. Algorithms change it through hooks, never by copying it.

Hooks cover what the seed methods need: an extra loss term (FedProx's proximal term, MOON's contrastive
loss), which parameters train (FedRep, FedBABU), per-sample weights (MADE's of x, FedEM's per training row),
a forward pass with extra inputs (a conditioning vector), an objective replacing the label cross-entropy
(FedDRM's two-term loss, MADE's density model and ratio classifier), a change to the gradients before each
optimizer step (SCAFFOLD's control-variate correction), several optimizer steps on each mini-batch and an
update after them (pFedMe's inner problem and outer step, APFL's mixing weight). `evaluate` and `predict`
share the loop's `forward`; `training_loss` and `training_losses` score a model on the client's training split
(the clustering methods' model choice, DAC's similarity, the EM methods' E-steps).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from fedbench.core import metrics as M
from fedbench.core import timeline
from fedbench.core.errors import ClientDivergedError
from fedbench.core.types import OptimizerSpec, RoundContext
from fedbench.training.client_data import ClientData

ExtraLoss = Callable[[nn.Module, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
Forward = Callable[[nn.Module, torch.Tensor], torch.Tensor]
"""`(model, x) -> logits`: how a method calls its model where `model(x)` will not do (a conditioning vector)."""
T = TypeVar("T")


def _call(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The forward pass of a method without a `forward` hook."""
    return model(x)


@dataclass(frozen=True)
class TrainHooks:
    """Ways an algorithm adjusts local training.

    Attributes:
        extra_loss: `(model, x, y, logits) -> scalar` added to every batch's loss (the cross-entropy, or `loss`).
        trainable: `parameter name -> bool`; parameters it rejects are frozen for this job.
        sample_weight: `(x, y, rows) -> per-sample weights` multiplying the per-sample cross-entropy; `rows`
            are the batch's indices into the client's training split (int64, on the CPU), for weights fixed
            per training sample before the job (FedEM's responsibilities); weights of x alone (MADE) ignore it.
        forward: `(model, x) -> logits`, for models that need extra inputs (a conditioning vector).
        loss: `(model, x, y) -> scalar` objective replacing the label cross-entropy (a density model's NLL,
            a binary classifier's BCE). With it `sample_weight` and `forward` do not apply (setting either
            as well is a ValueError); `extra_loss` still adds on top, called with `logits=None`.
        adjust_gradients: `(model) -> None`, called once per step after `backward` and before the optimizer
            step; it changes the parameters' `.grad` in place (SCAFFOLD adds c - c_i). A parameter whose
            `.grad` is None got no gradient this step; the hook may set one.
        inner_steps: optimizer steps taken on each mini-batch, the batch loss recomputed before each
            (pFedMe's K steps on its inner problem). 1 (the default) is plain mini-batch training.
        after_batch: `model -> None`, called after a mini-batch's last optimizer step (pFedMe's outer update
            of its local copy of the global model, APFL's step on its mixing weight); it may change tensors
            the other hooks read, never the optimizer's parameters.
    """

    extra_loss: ExtraLoss | None = None
    trainable: Callable[[str], bool] | None = None
    sample_weight: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    forward: Forward | None = None
    loss: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    adjust_gradients: Callable[[nn.Module], None] | None = None
    inner_steps: int = 1
    after_batch: Callable[[nn.Module], None] | None = None


def scheduled_lr(spec: OptimizerSpec, round: int, rounds: int) -> float:
    """The learning rate of `round` (1-based) of `rounds`: constant, or 0.5 lr (1 + cos(pi (round - 1) / rounds))."""
    if spec.schedule == "cosine":
        return 0.5 * spec.lr * (1.0 + math.cos(math.pi * (round - 1) / max(rounds, 1)))
    return spec.lr


OPTIMIZERS_KEPT = 4
"""Optimizers `make_optimizer` keeps for reuse (the last ones made, per parameter list and spec): a worker's
model is built once and trained by every job, and a method may train two (a global and a personal model)."""
_kept: collections.OrderedDict[tuple, torch.optim.Optimizer] = collections.OrderedDict()


def make_optimizer(params: list[nn.Parameter], spec: OptimizerSpec, lr: float) -> torch.optim.Optimizer:
    """`spec`'s optimizer at learning rate `lr` (the round's, from `scheduled_lr`), as if new: one made before
    for the same parameters is reused with its state cleared (SGD's momentum buffers, Adam's moments and step
    counts, which are all an optimizer keeps) and `lr` set. Constructing one costs about 0.3 ms (torch guards
    its parameter-group setup against dynamo): a tenth of a tiny client's job."""
    # the round's lr is set on reuse, so it is no part of the key; the optimizer holds the parameters, so
    # their ids cannot pass to others while it is kept
    key = (spec.name, spec.momentum, spec.weight_decay, tuple(id(p) for p in params))
    optimizer = _kept.pop(key, None)
    if optimizer is None:
        if spec.name == "adam":
            optimizer = torch.optim.Adam(params, lr=lr, weight_decay=spec.weight_decay)
        else:
            optimizer = torch.optim.SGD(params, lr=lr, momentum=spec.momentum, weight_decay=spec.weight_decay)
    else:
        optimizer.state.clear()
        for group in optimizer.param_groups:
            group["lr"] = lr
    _kept[key] = optimizer
    while len(_kept) > OPTIMIZERS_KEPT:
        _kept.popitem(last=False)
    return optimizer


def on_device(model: nn.Module, device: str | torch.device) -> nn.Module:
    """`model` on `device`. `.to` walks every submodule (about 0.07 ms for LeNet-5, every job), so it is skipped
    when the first parameter is there already, as a worker's reused model always is."""
    first = next(model.parameters(), None)
    return model if first is not None and first.device == torch.device(device) else model.to(device)


def batch_indices(num_train: int, ctx: RoundContext) -> Iterator[torch.Tensor]:
    """The job's mini-batches of row indices: `ctx.local_epochs` shuffled passes over the rows, or, with
    `ctx.local_steps`, that many batches walking on through fresh shuffled passes. The shuffles come from a
    generator seeded from (run seed, round, client), so the same job gives the same batches on any worker."""
    generator = torch.Generator().manual_seed(ctx.rng_seed("shuffle"))
    epochs, steps = 0, 0
    while num_train and (steps < ctx.local_steps if ctx.local_steps is not None else epochs < ctx.local_epochs):
        order = torch.randperm(num_train, generator=generator)
        for start in range(0, num_train, ctx.batch_size):
            if ctx.local_steps is not None and steps == ctx.local_steps:
                return
            yield order[start : start + ctx.batch_size]
            steps += 1
        epochs += 1


def train_local(
    model: nn.Module, data: ClientData, ctx: RoundContext, hooks: TrainHooks = TrainHooks()
) -> dict[str, float]:
    """Train `model` in place on the job's mini-batches (`batch_indices`: epochs or steps) at the round's
    learning rate (`scheduled_lr`).

    The batch loss is the cross-entropy of the logits (weighted per sample by `hooks.sample_weight`), or
    `hooks.loss` where set, plus `hooks.extra_loss`; `hooks.adjust_gradients` may change its gradients before
    each step; each batch gets `hooks.inner_steps` optimizer steps, then `hooks.after_batch`. Raises
    ClientDivergedError as soon as a batch loss is NaN or infinite, and ValueError if `hooks.loss` is combined
    with `hooks.sample_weight` or `hooks.forward`, or `hooks.inner_steps` < 1.

    Returns:
        `train_loss` (mean over the mini-batches of the loss at each batch's first step), `train_steps` (mini-batches),
        `train_samples`.
    """
    if hooks.loss is not None and (hooks.sample_weight is not None or hooks.forward is not None):
        raise ValueError(
            "TrainHooks.loss replaces the cross-entropy of the logits; it cannot be combined with "
            "sample_weight or forward"
        )
    if hooks.inner_steps < 1:
        raise ValueError(f"TrainHooks.inner_steps must be >= 1, got {hooks.inner_steps}")
    device = torch.device(ctx.device)
    on_device(model, device).train()
    for name, p in model.named_parameters():
        p.requires_grad_(hooks.trainable is None or hooks.trainable(name))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(params, ctx.optimizer, scheduled_lr(ctx.optimizer, ctx.round, ctx.rounds))
    forward = hooks.forward or _call

    def batch_loss(x: torch.Tensor, y: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        if hooks.loss is not None:
            logits, loss = None, hooks.loss(model, x, y)
        else:
            logits = forward(model, x)
            if hooks.sample_weight is None:
                loss = F.cross_entropy(logits, y)
            else:
                loss = (F.cross_entropy(logits, y, reduction="none") * hooks.sample_weight(x, y, rows)).mean()
        if hooks.extra_loss is not None:
            loss = loss + hooks.extra_loss(model, x, y, logits)
        return loss

    total_loss, steps = 0.0, 0
    timeline.mark_once("first_step")  # what bench/cli_overhead.py calls the first client training
    for idx in batch_indices(data.num_train, ctx):
        x, y = data.train_batch(idx, device)
        for inner in range(hooks.inner_steps):
            loss = batch_loss(x, y, idx)
            value = loss.item()
            if not math.isfinite(value):
                raise ClientDivergedError(f"client {ctx.client_id}: training loss became {value} in round {ctx.round}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if hooks.adjust_gradients is not None:
                hooks.adjust_gradients(model)
            optimizer.step()
            if inner == 0:
                total_loss += value
        if hooks.after_batch is not None:
            hooks.after_batch(model)
        steps += 1
    return {
        M.TRAIN_LOSS: total_loss / max(steps, 1),
        M.TRAIN_STEPS: float(steps),
        M.TRAIN_SAMPLES: float(data.num_train),
    }


@torch.no_grad()
def _over_test_split(
    model: nn.Module,
    data: ClientData,
    batch_size: int,
    device: str,
    forward: Forward | None,
    per_batch: Callable[[torch.Tensor, torch.Tensor], T],
) -> list[T]:
    """`per_batch(logits, labels)` of each batch of the client's local test split, in order.

    The set-up `evaluate`, `predict` and `probabilities` share, so that the three score a model the same way:
    on `device`, in eval mode (BatchNorm's running statistics, no dropout), without an autograd graph, through
    the method's `forward` where it has one.
    """
    on_device(model, device).eval()
    forward = forward or _call
    return [per_batch(forward(model, xb), yb) for xb, yb in data.test_batches(batch_size, device)]


def predict(
    model: nn.Module,
    data: ClientData,
    batch_size: int = 256,
    device: str = "cpu",
    forward: Forward | None = None,
) -> torch.Tensor:
    """The model's predicted classes (int64 [n_test], on the CPU) for the client's local test split."""
    preds = _over_test_split(model, data, batch_size, device, forward, lambda logits, _: logits.argmax(dim=1).cpu())
    return torch.cat(preds) if preds else torch.zeros(0, dtype=torch.int64)


def probabilities(
    model: nn.Module,
    data: ClientData,
    batch_size: int = 256,
    device: str = "cpu",
    forward: Forward | None = None,
) -> torch.Tensor:
    """Softmax of the model's logits (float64 [n_test, classes], on the CPU) for the client's local test split."""
    rows = _over_test_split(
        model, data, batch_size, device, forward, lambda logits, _: F.softmax(logits.double(), dim=1).cpu()
    )
    return torch.cat(rows) if rows else torch.zeros((0, 0), dtype=torch.float64)


def _batch_scores(logits: torch.Tensor, labels: torch.Tensor) -> tuple[float, int]:
    """One test batch's summed cross-entropy and count of correct predictions."""
    return F.cross_entropy(logits, labels, reduction="sum").item(), (logits.argmax(dim=1) == labels).sum().item()


def evaluate(
    model: nn.Module,
    data: ClientData,
    batch_size: int = 256,
    device: str = "cpu",
    forward: Forward | None = None,
) -> dict[str, float]:
    """Accuracy and mean cross-entropy of `model` on the client's local test split; `test_samples` is the count."""
    correct, loss_sum = 0, 0.0
    for batch_loss, batch_correct in _over_test_split(model, data, batch_size, device, forward, _batch_scores):
        loss_sum += batch_loss  # one float addition a batch, in order (sum() compensates from Python 3.12)
        correct += batch_correct
    n = data.num_test
    return {
        M.ACCURACY: correct / n if n else float("nan"),
        M.LOSS: loss_sum / n if n else float("nan"),
        M.TEST_SAMPLES: float(n),
    }


@torch.no_grad()
def training_loss(model: nn.Module, data: ClientData, device: str = "cpu", batch_size: int = 256) -> float:
    """Mean cross-entropy of `model` (eval mode) over the client's training split; NaN where it has no rows, a
    measurement callers must skip (IFCA never picks it, DAC leaves its similarity as it was)."""
    on_device(model, device).eval()
    total = 0.0
    for x, y in data.train_batches(batch_size, device):
        total += F.cross_entropy(model(x), y, reduction="sum").item()
    return total / data.num_train if data.num_train else float("nan")


@torch.no_grad()
def training_losses(model: nn.Module, data: ClientData, device: str = "cpu", batch_size: int = 256) -> torch.Tensor:
    """Cross-entropy of `model` (eval mode) on each training row (float64 [n_train], on the CPU; empty without
    rows)."""
    on_device(model, device).eval()
    losses = [
        F.cross_entropy(model(x), y, reduction="none").double().cpu() for x, y in data.train_batches(batch_size, device)
    ]
    return torch.cat(losses) if losses else torch.zeros(0, dtype=torch.float64)
