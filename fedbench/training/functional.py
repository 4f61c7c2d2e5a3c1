"""Many clients' local training in one vectorised pass: `torch.func` (`functional_call` under `vmap` of
`grad_and_value`) over the clients' stacked weights, with the optimizer written as functions of tensors.

Each client sees exactly the batches `train_local` gives it (`batch_indices`, from the same seeded shuffle): a
batch shorter than the run's batch size is padded and masked, and a client with no batch left takes no step, so
its weights and optimizer state stay as they are. Each client's transforms draw from its own RNG state, seeded
as its `train_local` job would be, so they draw what they draw alone. What differs from `train_local` is only the
order floating-point sums are taken in (docs/backends.md states the tolerance this leaves).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from fedbench.core import metrics as M
from fedbench.core.errors import ClientDivergedError
from fedbench.core.types import Arrays, Metrics, OptimizerSpec, RoundContext
from fedbench.training.client_data import ClientData
from fedbench.training.loop import ExtraLoss, batch_indices, on_device, scheduled_lr

Penalty = Callable[[Mapping[str, Tensor], Mapping[str, Tensor]], Tensor]
"""`(parameters, anchors) -> scalar` added to a client's batch loss: a pure function of the weights being trained
and the weights its training started from (FedProx's proximal term)."""

WEIGHT_TOLERANCE = 1e-5
"""The numeric contract, part 1: the most a client's weights trained in a vectorised pass may differ from what the
per-client path (`train_local`) gives them after one round's training, relatively (`weight_difference`)."""

RUN_TOLERANCE = 0.01
"""The numeric contract, part 2: the most a run's accuracies may differ (absolutely) from the per-client path's,
and its losses relatively, on a small scenario of a few rounds (tests/algorithms/test_contract.py). Over many
rounds, differences in the last bits grow as they do between thread counts: a run on the batched backend is a run
of its own, and its numerics tag says so (docs/backends.md)."""

ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8
"""torch.optim.Adam's defaults, which `make_optimizer` uses."""


def weight_difference(a: Arrays, b: Arrays) -> float:
    """||a - b|| / ||a|| over all of a model's floating-point tensors: how far two trainings of the same weights
    ended apart, relative to the weights' size."""
    keys = [k for k in a if np.issubdtype(np.asarray(a[k]).dtype, np.floating)]
    diff = math.sqrt(sum(float(np.square(np.float64(a[k]) - np.float64(b[k])).sum()) for k in keys))
    size = math.sqrt(sum(float(np.square(np.float64(a[k])).sum()) for k in keys))
    return diff / size if size else diff


def penalty_as_extra_loss(penalty: Penalty, anchors: Mapping[str, Tensor]) -> ExtraLoss:
    """`penalty` as `train_local`'s extra loss: of the model's trainable parameters and `anchors`."""

    def extra_loss(model: nn.Module, x: Tensor, y: Tensor, logits: Tensor | None) -> Tensor:
        return penalty({name: p for name, p in model.named_parameters() if p.requires_grad}, anchors)

    return extra_loss


def functional_model_problem(model: nn.Module) -> str | None:
    """Why `model` cannot train in a vectorised pass, or None: a training step that changes buffers (BatchNorm's
    running statistics) or draws random numbers (dropout) is no pure function of the weights and the batch, and a
    pass reads buffers from one model, not from each client's weights."""
    for name, module in model.named_modules():
        if isinstance(module, (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd)):
            return f"its module {name or '(root)'} is a {type(module).__name__}"
    persistent = list(model.state_dict().keys() - dict(model.named_parameters()).keys())
    if persistent:
        return f"it holds buffers ({', '.join(sorted(persistent))}) that would be one model's, not each client's"
    return None


class ClientRng:
    """One client's torch RNG state, swapped in while its batches are prepared: the transforms (per-batch noise)
    of clients trained together draw as each would alone in a job seeded with `seed`."""

    def __init__(self, seed: int, device: torch.device):
        self.device = device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            if device.type == "cuda":  # as `torch_job_scope` seeds a job: CUDA's generator too
                torch.manual_seed(seed % (2**31))
            else:
                torch.default_generator.manual_seed(seed % (2**31))
            self.cpu = torch.get_rng_state()
            self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        cpu, cuda = torch.get_rng_state(), self._cuda_state()
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda, self.device)
        try:
            yield
        finally:
            self.cpu, self.cuda = torch.get_rng_state(), self._cuda_state()
            torch.set_rng_state(cpu)
            if cuda is not None:
                torch.cuda.set_rng_state(cuda, self.device)

    def _cuda_state(self) -> Tensor | None:
        return torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None


def train_together(
    model: nn.Module,
    starts: Sequence[Arrays],
    datas: Sequence[ClientData],
    ctxs: Sequence[RoundContext],
    rngs: Sequence[ClientRng],
    penalty: Penalty | None = None,
) -> list[tuple[Arrays, Metrics]]:
    """Train every client's weights from `starts[c]` on `datas[c]` as `train_local(model, data, ctx)` would with
    the extra loss `penalty(parameters, start weights)`, all clients in one vectorised step per mini-batch.

    Args:
        model: the architecture (`functional_model_problem` is None); its own weights are never read.
        starts, datas, ctxs, rngs: per client, in the same order: start weights (state_dict names), data, the
            job's context (its shuffle seed, the run's optimizer and round) and its RNG state.

    Returns:
        Per client, its trained weights (state_dict order; buffers as they started) and `train_local`'s metrics.

    Raises:
        ClientDivergedError: a client's training loss became NaN or infinite, naming the first such client.
    """
    device = torch.device(ctxs[0].device)
    on_device(model, device).train()
    schedules = [list(batch_indices(data.num_train, ctx)) for data, ctx in zip(datas, ctxs, strict=True)]
    steps = torch.tensor([len(s) for s in schedules], device=device)
    optimizer = FunctionalOptimizer(ctxs[0].optimizer, scheduled_lr(ctxs[0].optimizer, ctxs[0].round, ctxs[0].rounds))
    dtypes = {name: p.dtype for name, p in model.named_parameters()}
    params: dict[str, Tensor] = {}
    anchors: dict[str, Tensor] = {}
    constants: dict[str, Tensor] = {}  # parameters the forward pass never reaches: torch.optim leaves them alone

    def client_loss(p: dict, a: dict, x: Tensor, y: Tensor, mask: Tensor) -> Tensor:
        per_sample = F.cross_entropy(functional_call(model, (p, constants), (x,)), y, reduction="none")
        loss = torch.where(mask > 0, per_sample, 0.0).sum() / mask.sum().clamp(min=1.0)  # a padded row's NaN stays out
        return loss + penalty(p, a) if penalty is not None else loss

    step_all = vmap(grad_and_value(client_loss))
    loss_sums = torch.zeros(len(starts), dtype=torch.float64, device=device)  # as train_local's Python floats
    for t in range(int(steps.max().item()) if len(starts) else 0):
        x, y, mask = padded_batches(datas, schedules, rngs, t, ctxs[0].batch_size, device)
        if t == 0:
            unused = unreached_parameters(model, x[int(torch.argmax(steps))])
            constants = {name: p.detach() for name, p in model.named_parameters() if name in unused}
            params = {
                n: torch.stack([torch.from_numpy(np.array(s[n])) for s in starts]).to(device, dtypes[n])
                for n in dtypes
                if n not in unused
            }
            anchors = {n: p.clone() for n, p in params.items()} if penalty is not None else {}
            opt_state = optimizer.init(params)
        grads, losses = step_all(params, anchors, x, y, mask)
        active = steps > t
        params, opt_state = optimizer.step(params, grads, opt_state, t, active)
        loss_sums += torch.where(active, losses.double(), 0.0)
    totals = loss_sums.tolist()
    for c, total in enumerate(totals):
        if not math.isfinite(total):
            raise ClientDivergedError(
                f"client {ctxs[c].client_id}: training loss became {total} in round {ctxs[c].round}"
            )
    state_names = list(model.state_dict())
    trained = []
    for c, (data, start) in enumerate(zip(datas, starts, strict=True)):
        weights = {
            n: params[n][c].detach().cpu().numpy().copy() if n in params else np.array(start[n], copy=True)
            for n in state_names
        }
        n_steps = len(schedules[c])
        metrics = {
            M.TRAIN_LOSS: totals[c] / max(n_steps, 1),
            M.TRAIN_STEPS: float(n_steps),
            M.TRAIN_SAMPLES: float(data.num_train),
        }
        trained.append((weights, metrics))
    return trained


def unreached_parameters(model: nn.Module, x: Tensor) -> set[str]:
    """Parameters that the forward pass of `x` does not reach (a head only some methods use): they get no gradient,
    so torch.optim never steps them (weight decay and momentum included), where a functional gradient would be zero
    and decay them."""
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(model(x).float().sum(), [p for _, p in named], allow_unused=True)
    return {name for (name, _), g in zip(named, grads, strict=True) if g is None}


def padded_batches(
    datas: Sequence[ClientData],
    schedules: Sequence[list[Tensor]],
    rngs: Sequence[ClientRng],
    t: int,
    batch_size: int,
    device: torch.device,
) -> tuple[Tensor, Tensor, Tensor]:
    """Every client's `t`-th mini-batch as (inputs [C, B, ...], labels [C, B], mask [C, B]): rows past a client's
    batch, and every row of a client whose batches ran out, are zeros with mask 0."""
    xs, ys, masks = [], [], []
    shape = None
    for data, schedule, rng in zip(datas, schedules, rngs, strict=True):
        if t < len(schedule):
            with rng.active():
                x, y = data.train_batch(schedule[t], device)
            shape, pad = x.shape[1:], batch_size - len(y)
            xs.append(F.pad(x, (0, 0) * (x.dim() - 1) + (0, pad)) if pad else x)
            ys.append(F.pad(y, (0, pad)) if pad else y)
            masks.append(torch.arange(batch_size, device=device) < len(y))
        else:
            xs.append(None)
            ys.append(torch.zeros(batch_size, dtype=torch.int64, device=device))
            masks.append(torch.zeros(batch_size, dtype=torch.bool, device=device))
    assert shape is not None, "called only while some client has a batch left"
    filler = torch.zeros((batch_size, *shape), device=device)
    return (
        torch.stack([x if x is not None else filler for x in xs]),
        torch.stack(ys),
        torch.stack(masks).to(filler.dtype),
    )


class FunctionalOptimizer:
    """`make_optimizer`'s SGD (momentum, weight decay) and Adam as functions of stacked tensors, updating only the
    clients that took a step (`active`); torch.optim's update rules, term for term."""

    def __init__(self, spec: OptimizerSpec, lr: float):
        self.spec, self.lr = spec, lr

    def init(self, params: dict[str, Tensor]) -> dict[str, dict[str, Tensor]]:
        if self.spec.name == "adam":
            return {key: {n: torch.zeros_like(p) for n, p in params.items()} for key in ("m", "v")}
        return {"buf": {n: torch.zeros_like(p) for n, p in params.items()}} if self.spec.momentum else {}

    def step(
        self, params: dict[str, Tensor], grads: dict[str, Tensor], state: dict, t: int, active: Tensor
    ) -> tuple[dict[str, Tensor], dict]:
        """Step `t` (from 0: every client still training has taken exactly t steps before)."""
        new_params, new_state = {}, {key: {} for key in state}
        for n, p in params.items():
            keep = active.view(-1, *([1] * (p.dim() - 1)))
            g = grads[n] + self.spec.weight_decay * p if self.spec.weight_decay else grads[n]
            if self.spec.name == "adam":
                m = torch.where(keep, ADAM_BETAS[0] * state["m"][n] + (1 - ADAM_BETAS[0]) * g, state["m"][n])
                v = torch.where(keep, ADAM_BETAS[1] * state["v"][n] + (1 - ADAM_BETAS[1]) * g * g, state["v"][n])
                new_state["m"][n], new_state["v"][n] = m, v
                step_size = self.lr / (1 - ADAM_BETAS[0] ** (t + 1))
                denom = v.sqrt() / math.sqrt(1 - ADAM_BETAS[1] ** (t + 1)) + ADAM_EPS
                update = step_size * m / denom
            elif self.spec.momentum:
                buf = g if t == 0 else self.spec.momentum * state["buf"][n] + g
                new_state["buf"][n] = torch.where(keep, buf, state["buf"][n])
                update = self.lr * buf
            else:
                update = self.lr * g
            new_params[n] = torch.where(keep, p - update, p)
        return new_params, new_state
