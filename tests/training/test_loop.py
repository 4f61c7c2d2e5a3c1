import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from fedbench.core.errors import ClientDivergedError
from fedbench.core.types import OptimizerSpec, RoundContext
from fedbench.training import (
    ClientData,
    TrainHooks,
    average_weights,
    evaluate,
    get_weights,
    set_weights,
    train_local,
    training_loss,
    training_losses,
)
from fedbench.training.loop import batch_indices, scheduled_lr


def separable_data(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g)
    y = (x[:, 0] > 0).long()
    return ClientData(x[: n // 2], y[: n // 2], x[n // 2 :], y[n // 2 :], y[: n // 2], y[n // 2 :])


def ctx(lr=0.1, epochs=3, seed=0):
    return RoundContext(
        round=1,
        client_id=0,
        seed=seed,
        local_epochs=epochs,
        batch_size=16,
        optimizer=OptimizerSpec(lr=lr),
        num_classes=2,
    )


def model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2))


def test_training_learns_a_separable_problem():
    data, m = separable_data(), model()
    before = evaluate(m, data)["accuracy"]
    train_local(m, data, ctx())
    after = evaluate(m, data)["accuracy"]
    assert after > 0.9 and after > before


def test_same_context_gives_identical_weights_and_another_seed_does_not():
    data = separable_data()
    runs = []
    for seed in (0, 0, 1):
        m = model()
        train_local(m, data, ctx(seed=seed))
        runs.append(get_weights(m))
    assert all(np.array_equal(runs[0][k], runs[1][k]) for k in runs[0])
    assert any(not np.array_equal(runs[0][k], runs[2][k]) for k in runs[0])


def test_diverging_loss_raises_with_the_client_and_round():
    with pytest.raises(ClientDivergedError, match="client 0.*round 1"):
        train_local(model(), separable_data(), ctx(lr=1e30))


def test_hooks_freeze_parameters_and_add_loss_terms():
    data, m = separable_data(), model()
    frozen_before = m[0].weight.detach().clone()
    train_local(m, data, ctx(), TrainHooks(trainable=lambda name: not name.startswith("0.")))
    assert torch.equal(m[0].weight, frozen_before)
    plain, shrunk = model(), model()
    train_local(plain, data, ctx())
    penalty = TrainHooks(extra_loss=lambda mod, x, y, logits: 0.5 * sum((p**2).sum() for p in mod.parameters()))
    train_local(shrunk, data, ctx(), penalty)

    def norm(mod):
        return sum(float((p.detach() ** 2).sum()) for p in mod.parameters())

    assert norm(shrunk) < 0.5 * norm(plain)


def test_sample_weights_of_zero_leave_the_model_unchanged():
    data, m = separable_data(), model()
    before = get_weights(m)
    train_local(m, data, ctx(), TrainHooks(sample_weight=lambda x, y, rows: torch.zeros(len(y))))
    after = get_weights(m)
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_loss_hook_replaces_the_cross_entropy():
    """A one-parameter model with logits (w, 0): plain SGD on the hook's (logits - 3)^2 takes w to 3, where
    the cross-entropy of the labels (about half of each class) would keep it near 0."""

    class OneParameter(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(()))

        def forward(self, x):
            return torch.stack([self.w.expand(len(x)), torch.zeros(len(x))], dim=1)

    data = separable_data()
    sgd = RoundContext(
        round=1,
        client_id=0,
        seed=0,
        local_epochs=3,
        batch_size=16,
        optimizer=OptimizerSpec(lr=0.5, momentum=0.0),
        num_classes=2,
    )
    hooked, plain = OneParameter(), OneParameter()
    metrics = train_local(hooked, data, sgd, TrainHooks(loss=lambda mod, x, y: ((mod(x)[:, 0] - 3) ** 2).mean()))
    train_local(plain, data, sgd)
    assert hooked.w.item() == pytest.approx(3.0, abs=1e-3)
    assert abs(plain.w.item()) < 1.0
    assert metrics["train_steps"] == 3 * 8 and metrics["train_loss"] > 0


def test_sample_weights_see_the_batch_rows_of_the_training_split():
    data, seen = separable_data(), []

    def weight(x, y, rows):
        assert torch.equal(x, data.train_batch(rows)[0]) and torch.equal(y, data.train_batch(rows)[1])
        seen.append(rows)
        return torch.ones(len(y))

    train_local(model(), data, ctx(epochs=1), TrainHooks(sample_weight=weight))
    assert sorted(torch.cat(seen).tolist()) == list(range(data.num_train))  # one epoch: every row once


def test_loss_hook_cannot_be_combined_with_sample_weights_or_forward():
    def loss(mod, x, y):
        return mod(x).sum()

    with pytest.raises(ValueError, match="sample_weight"):
        train_local(
            model(), separable_data(), ctx(), TrainHooks(loss=loss, sample_weight=lambda x, y, rows: torch.ones(len(y)))
        )
    with pytest.raises(ValueError, match="forward"):
        train_local(model(), separable_data(), ctx(), TrainHooks(loss=loss, forward=lambda mod, x: mod(x)))


def test_inner_steps_repeat_each_batch_then_after_batch_runs_once():
    """On the data-free loss (w - 3)^2 / 2, SGD at lr 0.5 halves w - 3 per step: 2 batches x 3 inner steps
    take w from 0 to 3 - 3 / 2^6, as 6 plain batches do. `after_batch` sees each batch's last iterate, and
    the reported loss is the mean of each batch's first-step loss."""
    w = nn.Linear(1, 1, bias=False)
    nn.init.zeros_(w.weight)
    seen = []
    job = RoundContext(
        round=1,
        client_id=0,
        seed=0,
        local_epochs=2,
        batch_size=128,
        num_classes=2,
        optimizer=OptimizerSpec(lr=0.5, momentum=0.0),
    )
    hooks = TrainHooks(
        loss=lambda m, x, y: 0.5 * (m.weight.sum() - 3) ** 2,
        inner_steps=3,
        after_batch=lambda m: seen.append(m.weight.item()),
    )
    metrics = train_local(w, separable_data(), job, hooks)  # 128 training rows: one batch an epoch
    assert seen == [3 - 3 / 2**3, 3 - 3 / 2**6] and w.weight.item() == 3 - 3 / 2**6
    assert metrics["train_steps"] == 2.0
    assert metrics["train_loss"] == pytest.approx((0.5 * 3**2 + 0.5 * (3 / 2**3) ** 2) / 2)
    with pytest.raises(ValueError, match="inner_steps"):
        train_local(w, separable_data(), job, TrainHooks(inner_steps=0))


def test_average_weights_is_sample_weighted_and_keeps_integer_buffers():
    a = {"w": np.array([0.0, 2.0], dtype=np.float32), "n": np.array(3, dtype=np.int64)}
    b = {"w": np.array([4.0, 6.0], dtype=np.float32), "n": np.array(9, dtype=np.int64)}
    avg = average_weights([a, b], [1, 3])
    np.testing.assert_allclose(avg["w"], [3.0, 5.0])
    assert avg["w"].dtype == np.float32 and avg["n"] == 3


def test_set_weights_round_trips_read_only_arrays():
    m, other = model(0), model(1)
    weights = get_weights(m)
    for arr in weights.values():
        arr.setflags(write=False)  # as numpy arrives from Ray's object store
    set_weights(other, weights)
    assert all(np.array_equal(weights[k], v) for k, v in get_weights(other).items())


def test_local_steps_walk_on_through_fresh_shuffles_and_epochs_take_the_same_first_pass():
    steps = RoundContext(
        round=1,
        client_id=0,
        seed=0,
        local_epochs=1,
        batch_size=4,
        optimizer=OptimizerSpec(),
        num_classes=2,
        local_steps=7,
    )
    batches = list(batch_indices(10, steps))  # 3 batches a pass (4, 4, 2 rows)
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4, 2, 4]
    assert sorted(torch.cat(batches[:3]).tolist()) == list(range(10))
    one_epoch = list(batch_indices(10, replace(steps, local_steps=None)))
    assert len(one_epoch) == 3 and all(torch.equal(a, b) for a, b in zip(one_epoch, batches, strict=False))
    assert list(batch_indices(0, steps)) == []  # no rows, no steps (not an endless loop)
    metrics = train_local(model(), separable_data(), replace(steps, batch_size=16, local_steps=5))
    assert metrics["train_steps"] == 5.0


def test_the_cosine_schedule_sets_each_rounds_learning_rate():
    cosine = OptimizerSpec(name="sgd", lr=0.1, momentum=0.0, schedule="cosine")
    assert scheduled_lr(cosine, 1, 10) == pytest.approx(0.1)
    assert scheduled_lr(cosine, 6, 10) == pytest.approx(0.05)
    assert 0 < scheduled_lr(cosine, 10, 10) < 0.003
    assert scheduled_lr(OptimizerSpec(lr=0.1), 10, 10) == 0.1
    # one plain SGD step on the loss w (gradient 1) moves w by exactly the round's learning rate
    for round in (1, 6):
        w = nn.Linear(1, 1, bias=False)
        nn.init.zeros_(w.weight)
        job = RoundContext(
            round=round,
            client_id=0,
            seed=0,
            local_epochs=1,
            batch_size=1,
            optimizer=cosine,
            num_classes=2,
            rounds=10,
            local_steps=1,
        )
        train_local(w, separable_data(n=4), job, TrainHooks(loss=lambda m, x, y: m.weight.sum()))
        assert w.weight.item() == pytest.approx(-scheduled_lr(cosine, round, 10))


def test_adjust_gradients_runs_once_per_step_between_backward_and_the_step():
    """Plain SGD on the loss w (gradient 1): a hook adding 2 to every gradient makes each step move w by
    3 lr instead of lr, and it sees the backward's gradient (1) every time it runs."""
    seen = []

    def adjust(m: nn.Module) -> None:
        seen.append(m.weight.grad.item())
        m.weight.grad.add_(2.0)

    w = nn.Linear(1, 1, bias=False)
    nn.init.zeros_(w.weight)
    job = RoundContext(
        round=1,
        client_id=0,
        seed=0,
        local_epochs=1,
        batch_size=1,
        optimizer=OptimizerSpec(lr=0.1, momentum=0.0),
        num_classes=2,
        local_steps=4,
    )
    metrics = train_local(
        w, separable_data(n=8), job, TrainHooks(loss=lambda m, x, y: m.weight.sum(), adjust_gradients=adjust)
    )
    assert seen == [1.0] * int(metrics["train_steps"]) and metrics["train_steps"] == 4
    assert w.weight.item() == pytest.approx(-4 * 3 * 0.1)


def test_training_loss_is_the_mean_cross_entropy_over_the_training_split_and_nan_without_rows():
    data, m = separable_data(n=600), model()  # 300 training rows: two scoring batches of 256 and 44
    losses = training_losses(m, data)
    assert losses.dtype == torch.float64 and losses.shape == (300,)
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(m(data.train_x), data.train_y, reduction="none").double()
    torch.testing.assert_close(losses, expected, rtol=1e-6, atol=1e-7)
    assert training_loss(m, data) == pytest.approx(float(expected.mean()), rel=1e-6)
    on_train = replace(data, test_x=data.train_x, test_y=data.train_y, test_source_y=data.train_source_y)
    assert training_loss(m, data) == evaluate(m, on_train)["loss"]  # the same sums, bit for bit
    empty = replace(data, train_x=data.train_x[:0], train_y=data.train_y[:0], train_source_y=data.train_source_y[:0])
    assert math.isnan(training_loss(m, empty)) and training_losses(m, empty).shape == (0,)


@pytest.mark.parametrize(
    "spec",
    [OptimizerSpec(lr=0.1, momentum=0.9, weight_decay=0.01), OptimizerSpec(name="adam", lr=0.01, weight_decay=0.01)],
)
def test_a_reused_optimizer_trains_exactly_as_a_new_one(spec, monkeypatch):
    """A worker's model is trained by job after job with one optimizer, its state (momentum, Adam's moments and
    step) cleared and the round's lr set: the second job must equal that job run with a brand-new optimizer."""
    from fedbench.training import loop

    data, start = separable_data(), get_weights(model())
    first, second = replace(ctx(), optimizer=spec), replace(ctx(seed=1), optimizer=replace(spec, lr=spec.lr / 2))

    def second_job(kept: int) -> dict:
        monkeypatch.setattr(loop, "OPTIMIZERS_KEPT", kept)
        loop._kept.clear()
        m = model()
        train_local(m, data, first)  # leaves momentum / moments behind in a kept optimizer
        set_weights(m, start)
        train_local(m, data, second)
        return get_weights(m)

    reused, fresh = second_job(4), second_job(0)
    assert all(np.array_equal(reused[k], fresh[k]) for k in fresh)
    assert len(loop._kept) == 0  # kept 0: nothing kept, every job made its own
    monkeypatch.setattr(loop, "OPTIMIZERS_KEPT", 4)
    m = model()
    train_local(m, data, first)
    optimizer = loop._kept[next(reversed(loop._kept))]
    train_local(m, data, second)
    assert (
        loop._kept[next(reversed(loop._kept))] is optimizer and optimizer.param_groups[0]["lr"] == second.optimizer.lr
    )


def test_a_model_already_on_the_device_is_not_moved_again():
    from fedbench.training.loop import on_device

    m = model()
    calls = []
    m.to = lambda *a, **k: calls.append(a) or m  # count what .to would have walked
    assert on_device(m, "cpu") is m and on_device(m, torch.device("cpu")) is m and not calls
    assert on_device(nn.ReLU(), "cpu") is not None  # no parameters: moved as before (nothing to walk)
