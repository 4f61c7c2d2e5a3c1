"""The one local-training loop. Algorithms change it through hooks, never by copying it.

Hooks cover what the seed methods need: an extra loss term (FedProx's proximal term, MOON's contrastive
loss, FedDRM's client-id loss), which parameters train (FedRep, FedBABU), per-sample weights (MADE), a
forward pass with extra inputs (a conditioning vector), and an objective replacing the label cross-entropy
(MADE's density model and ratio classifier).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from fedbench.core.errors import ClientDivergedError
from fedbench.core.types import OptimizerSpec, RoundContext
from fedbench.training.client_data import ClientData

ExtraLoss = Callable[[nn.Module, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class TrainHooks:
    """Ways an algorithm adjusts local training.

    Attributes:
        extra_loss: `(model, x, y, logits) -> scalar` added to every batch's loss (the cross-entropy, or `loss`).
        trainable: `parameter name -> bool`; parameters it rejects are frozen for this job.
        sample_weight: `(x, y) -> per-sample weights` multiplying the per-sample cross-entropy.
        forward: `(model, x) -> logits`, for models that need extra inputs (a conditioning vector).
        loss: `(model, x, y) -> scalar` objective replacing the label cross-entropy (a density model's NLL,
            a binary classifier's BCE). With it `sample_weight` and `forward` do not apply (setting either
            as well is a ValueError); `extra_loss` still adds on top, called with `logits=None`.
    """

    extra_loss: ExtraLoss | None = None
    trainable: Callable[[str], bool] | None = None
    sample_weight: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    forward: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None = None
    loss: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor] | None = None


def make_optimizer(params: list[nn.Parameter], spec: OptimizerSpec) -> torch.optim.Optimizer:
    if spec.name == "adam":
        return torch.optim.Adam(params, lr=spec.lr, weight_decay=spec.weight_decay)
    return torch.optim.SGD(params, lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay)


def train_local(model: nn.Module, data: ClientData, ctx: RoundContext, hooks: TrainHooks = TrainHooks()) -> dict[str, float]:
    """Train `model` in place for `ctx.local_epochs` epochs of shuffled mini-batches.

    The batch loss is the cross-entropy of the logits (weighted per sample by `hooks.sample_weight`), or
    `hooks.loss` where set, plus `hooks.extra_loss`. Shuffling uses a generator seeded from (run seed,
    round, client), so the same job gives the same batches on any worker. Raises ClientDivergedError as
    soon as a batch loss is NaN or infinite, and ValueError if `hooks.loss` is combined with
    `hooks.sample_weight` or `hooks.forward`.

    Returns:
        `train_loss` (mean batch loss over the job), `train_steps`, `train_samples`.
    """
    if hooks.loss is not None and (hooks.sample_weight is not None or hooks.forward is not None):
        raise ValueError("TrainHooks.loss replaces the cross-entropy of the logits; it cannot be combined with "
                         "sample_weight or forward")
    device = torch.device(ctx.device)
    model.to(device).train()
    for name, p in model.named_parameters():
        p.requires_grad_(hooks.trainable is None or hooks.trainable(name))
    optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad], ctx.optimizer)
    generator = torch.Generator().manual_seed(ctx.rng_seed("shuffle"))
    forward = hooks.forward or (lambda m, x: m(x))
    total_loss, steps = 0.0, 0
    for _ in range(ctx.local_epochs):
        order = torch.randperm(data.num_train, generator=generator)
        for start in range(0, data.num_train, ctx.batch_size):
            idx = order[start : start + ctx.batch_size]
            x, y = data.train_batch(idx, device)
            if hooks.loss is not None:
                logits, loss = None, hooks.loss(model, x, y)
            else:
                logits = forward(model, x)
                if hooks.sample_weight is None:
                    loss = F.cross_entropy(logits, y)
                else:
                    loss = (F.cross_entropy(logits, y, reduction="none") * hooks.sample_weight(x, y)).mean()
            if hooks.extra_loss is not None:
                loss = loss + hooks.extra_loss(model, x, y, logits)
            value = loss.item()
            if not math.isfinite(value):
                raise ClientDivergedError(f"client {ctx.client_id}: training loss became {value} in round {ctx.round}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total_loss += value
            steps += 1
    return {"train_loss": total_loss / max(steps, 1), "train_steps": float(steps), "train_samples": float(data.num_train)}


@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: ClientData,
    batch_size: int = 256,
    device: str = "cpu",
    forward: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, float]:
    """Accuracy and mean cross-entropy of `model` on the client's local test split; `test_samples` is the count."""
    model.to(device).eval()
    forward = forward or (lambda m, xb: m(xb))
    correct, loss_sum = 0, 0.0
    for xb, yb in data.test_batches(batch_size, device):
        logits = forward(model, xb)
        loss_sum += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(dim=1) == yb).sum().item()
    n = data.num_test
    return {"accuracy": correct / n if n else float("nan"), "loss": loss_sum / n if n else float("nan"), "test_samples": float(n)}
