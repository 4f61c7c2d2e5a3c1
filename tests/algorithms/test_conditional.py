"""Client-Conditional FL (001): the statistics, the model's use of them, the uplink, pooled SGD, whole runs.

Training checks use `cond_mlp`, a conditioned MLP registered for this module only (digits are 8x8 and the
registered conditioned models, cnn_mnist and cnn_cifar, take 28x28 and 32x32 images and train too slowly
for a unit test on one core); `cnn_mnist` runs where only a forward pass or one step is needed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedbench.algorithms.base import SAMPLES, ModelBuilder, NoClientState
from fedbench.algorithms.conditional import (
    POOL,
    Conditional,
    ConditionalClientState,
    ConditionalConfig,
    ConditionalState,
    data_key,
    with_cond,
)
from fedbench.algorithms.conditional_stats import (
    client_statistics,
    encode_all,
    joint_matrix,
    normalize,
    random_conv_encoder,
    top_eigenvalues,
)
from fedbench.algorithms.fedavg import FedAvg
from fedbench.config.task import resolve_run
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.registry import MODELS
from fedbench.core.types import WEIGHTS, ClientResult, LocalTraining, OptimizerSpec, RoundContext
from fedbench.data import load_dataset
from fedbench.models.base import FedModel
from fedbench.runtime import run_spec
from fedbench.scenarios import ClientView, build_scenario
from fedbench.training import ClientData, evaluate, get_weights, materialize
from tests.conftest import tiny_spec
from tests.scenarios.helpers import make

SYNTHETIC_28 = {"name": "synthetic_images", "train_samples": 1000, "test_samples": 300}


def cond_mlp(input_shape: tuple[int, ...], num_classes: int, hidden: int = 64, cond_dim: int = 0) -> FedModel:
    """Flatten -> [x ; s] -> Linear(hidden) ReLU -> head: the smallest model conditioned like 001 eq. 2."""
    width = math.prod(input_shape)
    return FedModel(
        nn.Flatten(),
        nn.Sequential(nn.Linear(width + cond_dim, hidden), nn.ReLU()),
        nn.Linear(hidden, num_classes),
        cond_dim=cond_dim,
    )


@pytest.fixture
def registered_cond_mlp(monkeypatch):
    MODELS.names()  # load the registry first, so the entry is only added for this test and removed after
    monkeypatch.setitem(MODELS._entries, "cond_mlp", cond_mlp)


def ctx_for(client_id: int, round: int = 1, epochs: int = 1, batch: int = 32, lr: float = 0.05) -> RoundContext:
    return RoundContext(
        round=round,
        client_id=client_id,
        seed=0,
        local_epochs=epochs,
        batch_size=batch,
        optimizer=OptimizerSpec(lr=lr, momentum=0.9),
        num_classes=10,
    )


def clients_of(scenario_section: dict, dataset, seed: int = 0) -> tuple[list[ClientData], list[int]]:
    data, scenario = make(scenario_section, dataset, seed=seed)
    views = [scenario.view(1, c) for c in range(scenario.num_clients)]
    return [materialize(data, v, scenario.input_shape) for v in views], [v.distribution_id for v in views]


def first_rows(client: ClientData, n: int) -> ClientData:
    """The client with only its first n training rows (n = 0: a test-time client without labels)."""
    return replace(
        client, train_x=client.train_x[:n], train_y=client.train_y[:n], train_source_y=client.train_source_y[:n]
    )


def conditional(
    model: str = "cnn_mnist", shape=(1, 28, 28), num_clients: int = 2, training: LocalTraining | None = None, **config
) -> Conditional:
    return Conditional(
        ConditionalConfig(**config), ModelBuilder(model, shape, 10), num_clients, seed=0, training=training
    )


# -- statistics --------------------------------------------------------------------------------------------


def test_randomized_eigenvalues_match_the_exact_ones_and_pad_with_zeros():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(500, 120, generator=gen, dtype=torch.float64) * torch.linspace(3.0, 0.1, 120, dtype=torch.float64)
    centred = z - z.mean(0)
    exact = torch.linalg.eigvalsh(centred.T @ centred / 499).flip(0)[:32]
    approx = top_eigenvalues(z, 32, seed=1)
    assert torch.allclose(approx, exact, rtol=1e-3)
    assert torch.equal(top_eigenvalues(z, 32, seed=1), approx)  # the same procedure on every client
    few = top_eigenvalues(z[:10], 32, seed=1)  # 10 samples: covariance rank 9
    assert few.shape == (32,) and (few[:9] > 1e-3).all() and few[9:].abs().max() < 1e-10
    assert torch.equal(top_eigenvalues(z[:1], 32, seed=1), torch.zeros(32, dtype=torch.float64))


def test_log1p_normalisation_compresses_raw_eigenvalues_and_keeps_order_and_zero_padding():
    clients, _ = clients_of({"preset": "conditional/E1", "clusters": 2}, SYNTHETIC_28)
    client = clients[0]
    features = encode_all([client.train_batch(torch.arange(client.num_train))[0]], None)
    raw = client_statistics(features, client.train_y, 10, 32, seed=1, mode="raw")
    s = client_statistics(features, client.train_y, 10, 32, seed=1, mode="log1p")
    assert torch.allclose(s, torch.log1p(raw))
    assert (torch.diff(s) <= 1e-6).all()  # descending, like the eigenvalues
    # 784 pixels in [0, 1]: the top raw eigenvalues are >> 1 and dominate (norm about 21, four times the
    # conv features'); log1p keeps every entry O(1) and shrinks the spread between the first and the 32nd.
    assert raw.norm() > 15 and s.norm() < raw.norm() / 3 and s.max() < 4
    assert s[0] / s[-1] < (raw[0] / raw[-1]) / 3
    assert torch.equal(normalize(torch.zeros(4, dtype=torch.float64), "log1p"), torch.zeros(4, dtype=torch.float64))


def test_statistics_are_close_within_a_label_shift_cluster_and_apart_between_clusters(registered_cond_mlp):
    """001 E1 on digits (real images; synthetic_images would not do: its random class prototypes make every
    group of 5 classes look alike to PCA). 10 clients of about 115 samples, 5 per cluster."""
    within, between = [], []
    for seed in range(3):  # one federation's ratio ranges 1.47 to 1.9 over seeds: judge a few
        clients, ids = clients_of({"preset": "conditional/E1", "clusters": 2}, "digits", seed=seed)
        alg = conditional("cond_mlp", (1, 8, 8), num_clients=len(clients))
        s, ids = (
            np.stack([alg.statistics(client, ctx_for(cid)).numpy() for cid, client in enumerate(clients)]),
            np.array(ids),
        )
        assert len(set(ids)) == 2 and s.shape == (len(clients), 32)
        dist = np.linalg.norm(s[:, None] - s[None], axis=2)
        same, other = ids[:, None] == ids[None], ~np.eye(len(ids), dtype=bool)
        within.append(dist[same & other].mean())
        between.append(dist[~same].mean())
    assert np.mean(between) > 1.5 * np.mean(within), (within, between)


def test_label_permutations_do_not_change_the_eigenvalues():
    """A known limit of eigenvalue statistics (001 E3b): relabelling by a permutation is an orthogonal map of
    the label block, so s cannot tell such clusters apart (the model can only tell clients apart)."""
    gen = torch.Generator().manual_seed(0)
    features, labels = torch.rand(300, 20, generator=gen), torch.randint(0, 10, (300,), generator=gen)
    permuted = torch.tensor([3, 7, 0, 9, 1, 5, 2, 8, 6, 4])[labels]
    a = top_eigenvalues(joint_matrix(features, labels, 10), 16, seed=1)
    b = top_eigenvalues(joint_matrix(features, permuted, 10), 16, seed=1)
    assert torch.allclose(a, b, rtol=1e-8)


def test_random_encoder_is_fixed_by_the_seed_and_used_for_32x32_images():
    x = torch.rand(4, 3, 32, 32)
    same = [random_conv_encoder(3, seed=7)(x) for _ in range(2)]
    assert same[0].shape == (4, 128) and torch.equal(same[0], same[1])
    assert not torch.equal(same[0], random_conv_encoder(3, seed=8)(x))
    alg = conditional("cnn_cifar", (3, 32, 32))
    assert alg.feature_map == "random_conv" and conditional().feature_map == "identity"
    clients, _ = clients_of(
        {"preset": "conditional/E1", "clusters": 2},
        {"name": "synthetic_images", "channels": 3, "size": 32, "train_samples": 400, "test_samples": 100},
    )
    s = alg.statistics(clients[0], ctx_for(0))
    assert s.shape == (32,) and torch.isfinite(s).all() and s[0] > 0


# -- configuration -----------------------------------------------------------------------------------------


def test_the_model_is_built_with_cond_dim_equal_to_the_number_of_eigenvalues():
    alg = conditional(num_eigenvalues=8)
    model = alg.builder()
    assert model.cond_dim == 8 and model.body[0].in_features == 64 * 7 * 7 + 8


def test_models_without_cond_dim_and_bad_values_are_refused():
    with pytest.raises(ConfigError, match="model.name.*cnn_mnist"):
        conditional("lenet5")
    with pytest.raises(ConfigError, match="model.cond_dim"):
        Conditional(ConditionalConfig(), ModelBuilder("cnn_mnist", (1, 28, 28), 10, (("cond_dim", 16),)), 2, 0)
    with pytest.raises(ConfigError, match="^algorithm.feature_map"):  # the encoder needs images: refused at task load
        tiny_spec(dataset="synthetic", model="mlp", algorithm={"name": "conditional", "feature_map": "random_conv"})
    with pytest.raises(ConfigError, match="^num_eigenvalues: "):
        ConditionalConfig(num_eigenvalues=0)


# -- client state and uplink -------------------------------------------------------------------------------


def test_statistics_are_kept_in_the_client_state_and_recomputed_when_the_data_change(registered_cond_mlp):
    clients, _ = clients_of({"preset": "conditional/E1", "clusters": 2}, "digits")
    alg = conditional("cond_mlp", (1, 8, 8))
    weights = alg.init_state().global_model
    _, state, _ = alg.client_update(weights, ConditionalClientState(), clients[0], ctx_for(0))
    assert state.stats_key == data_key(clients[0]) and state.stats.shape == (32,)
    # Same data: the stored vector is reused as is (a marked copy survives the next round).
    marked = dataclasses.replace(state, stats=np.full(32, 0.5, dtype=np.float32))
    _, kept, _ = alg.client_update(weights, marked, clients[0], ctx_for(0, round=2))
    assert np.array_equal(kept.stats, marked.stats)
    # New data (a drift stage): recomputed from them.
    _, moved, _ = alg.client_update(weights, state, clients[7], ctx_for(0, round=3))
    assert moved.stats_key == data_key(clients[7]) and not np.allclose(moved.stats, state.stats)


def test_uplink_is_fedavgs_for_the_same_model_and_carries_no_statistics():
    clients, _ = clients_of({"preset": "conditional/E1", "clusters": 2}, SYNTHETIC_28)
    client = first_rows(clients[0], 32)
    cond = conditional()
    up, state, _ = cond.client_update(cond.init_state().global_model, ConditionalClientState(), client, ctx_for(0))
    model = cond.builder()
    assert set(up.sections) == {WEIGHTS, SAMPLES} and set(up.weights) == set(get_weights(model))
    assert all(up.weights[k].shape == v.shape for k, v in get_weights(model).items())
    assert not any(v.shape == state.stats.shape and np.allclose(v, state.stats) for v in up.arrays())
    plain = FedAvg(FedAvg.Config(), ModelBuilder("cnn_mnist", (1, 28, 28), 10), 2, 0)
    base, _, _ = plain.client_update(plain.init_state().global_model, NoClientState(), client, ctx_for(0))
    extra = up.nbytes - base.nbytes
    assert extra == 32 * 128 * 4  # only the first FC layer's 32 extra input columns (001 Sec. III-B)


# -- the model uses s_i ------------------------------------------------------------------------------------


def train(
    alg: Conditional, clients: list[ClientData], rounds: int, epochs: int
) -> tuple[ConditionalState, list[ConditionalClientState]]:
    state, client_states = alg.init_state(), [ConditionalClientState() for _ in clients]
    for r in range(1, rounds + 1):
        payloads = alg.configure(r, state, list(range(len(clients))))
        results = []
        for cid, client in enumerate(clients):
            ctx = ctx_for(cid, r, epochs)
            up, client_states[cid], metrics = alg.client_update(payloads[cid], client_states[cid], client, ctx)
            results.append(ClientResult(cid, up, metrics))
        state = alg.aggregate(r, state, results)
    return state, client_states


def conflicting_clients() -> list[ClientData]:
    """Two clients whose statistics differ and whose labels conflict, so that only s_i can resolve them:
    client 0 holds classes 0-4 labelled as they are; client 1 holds the other samples of classes 0-4 and all
    of classes 5-9, every label shifted by 5 (a class-0 image is a '5' there). Synthetic 28x28 images: the
    class prototypes make the eigenvalue spectra of 5 and 10 classes clearly different."""
    data = load_dataset("synthetic_images", None, train_samples=1200, test_samples=400)
    split = np.asarray(data.meta["split"])

    def rows(part: str, classes) -> np.ndarray:
        return np.flatnonzero((split == part) & np.isin(data.y, classes))

    low = np.arange(5)
    train_low, test_low = rows("train", low), rows("test", low)
    views = [
        ClientView(train_low[::2], test_low[::2], 0),
        ClientView(
            np.sort(np.r_[train_low[1::2], rows("train", low + 5)]),
            np.sort(np.r_[test_low[1::2], rows("test", low + 5)]),
            1,
            label_map=(np.arange(10) + 5) % 10,
        ),
    ]
    return [materialize(data, v, data.input_shape) for v in views]


def test_the_model_uses_the_statistics_where_the_same_image_has_different_labels(registered_cond_mlp):
    """After pooled training (001's protocol), each client's own s_i gives full accuracy and the other
    client's s_i turns the shared classes' answers to the other labelling. A test-time client holding the
    same data but no label (empty state and train split) rebuilds s from its inputs and pseudo-labels and
    scores like the training client."""
    clients = conflicting_clients()
    alg = conditional(
        "cond_mlp",
        (1, 28, 28),
        centralized_pool=True,
        training=LocalTraining(1, 32, OptimizerSpec(lr=0.05, momentum=0.9)),
    )
    state, client_states = train(alg, clients, rounds=10, epochs=1)
    model = alg.model_with(state.global_model.weights)
    stats = [torch.from_numpy(s.stats) for s in client_states]
    assert (stats[0] - stats[1]).norm() > 1.0
    scores = []
    for cid, client in enumerate(clients):
        own = alg.client_evaluate(state.global_model, client_states[cid], client, ctx_for(cid))["accuracy"]
        swapped = evaluate(model, client, forward=with_cond(stats[1 - cid]))["accuracy"]
        zeroed = evaluate(model, client, forward=with_cond(torch.zeros(32)))["accuracy"]
        test_time = alg.client_evaluate(
            state.global_model, ConditionalClientState(), first_rows(client, 0), ctx_for(cid)
        )["accuracy"]
        scores.append((own, swapped, zeroed, test_time))
        assert own > 0.95 and swapped < own - 0.25 and test_time > own - 0.05, scores
    assert scores[1][2] < scores[1][0] - 0.2, scores  # zeroed s: client 1 loses its shifted labels
    predictions = alg.client_predict(state.global_model, client_states[1], clients[1], ctx_for(1))["pred"]
    assert predictions.dtype == np.int64 and np.mean(predictions == clients[1].test_y.numpy()) == scores[1][0]


# -- pooled training ---------------------------------------------------------------------------------------


def pooled_round(
    alg: Conditional,
    state: ConditionalState,
    clients: list[ClientData],
    client_states: list[ConditionalClientState],
    r: int,
) -> tuple[ConditionalState, list]:
    payloads = alg.configure(r, state, list(range(len(clients))))
    uplinks = [
        alg.client_update(payloads[cid], client_states[cid], c, ctx_for(cid, r))[0] for cid, c in enumerate(clients)
    ]
    return alg.aggregate(r, state, [ClientResult(cid, up, {}) for cid, up in enumerate(uplinks)]), uplinks


def test_pooled_protocol_uploads_each_clients_rows_once_and_steps_on_their_union():
    """001's pooled protocol: with one batch holding the whole pool, a round is one SGD step on the mean loss
    over every client's rows, each conditioned on its own client's s_i; data travel only in round 1."""
    clients, _ = clients_of({"preset": "conditional/E1", "clusters": 2}, SYNTHETIC_28)
    small = [first_rows(c, 12) for c in clients[:2]]
    lr = 0.05
    alg = Conditional(
        ConditionalConfig(centralized_pool=True),
        ModelBuilder("cnn_mnist", (1, 28, 28), 10),
        2,
        seed=0,
        training=LocalTraining(local_epochs=1, batch_size=24, optimizer=OptimizerSpec(lr=lr, momentum=0.9)),
    )
    stats = [alg.statistics(c, ctx_for(i)) for i, c in enumerate(small)]

    def one_step(weights):
        model = alg.builder()
        model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in weights.items()})
        loss = (
            sum(
                F.cross_entropy(model(c.train_batch(torch.arange(12))[0], s.expand(12, -1)), c.train_y, reduction="sum")
                for c, s in zip(small, stats, strict=True)
            )
            / 24
        )
        loss.backward()
        return {name: weights[name] - lr * p.grad.numpy() for name, p in model.named_parameters()}

    state, client_states = alg.init_state(), [ConditionalClientState(), ConditionalClientState()]
    for r in (1, 2):
        expected = one_step(state.global_model.weights)
        state, uplinks = pooled_round(alg, state, small, client_states, r)
        for name in expected:
            assert np.allclose(state.global_model.weights[name], expected[name], atol=1e-6), (r, name)
        if r == 1:
            assert [up[POOL]["x"].shape for up in uplinks] == [(12, 1, 28, 28)] * 2
            assert all(np.array_equal(up[POOL]["stats"], s.numpy()) for up, s in zip(uplinks, stats, strict=True))
        else:  # the server holds both clients' current rows: only the sample counts travel
            assert [sorted(up.sections) for up in uplinks] == [[SAMPLES]] * 2
        assert math.isfinite(alg.round_metrics(state)[M.TRAIN_LOSS_MEAN])


def test_a_client_whose_data_changed_uploads_again_and_replaces_its_rows():
    clients, _ = clients_of({"preset": "conditional/E1", "clusters": 2}, SYNTHETIC_28)
    alg = Conditional(
        ConditionalConfig(centralized_pool=True),
        ModelBuilder("cnn_mnist", (1, 28, 28), 10),
        2,
        seed=0,
        training=LocalTraining(1, 64, OptimizerSpec(lr=0.01)),
    )
    state, client_states = alg.init_state(), [ConditionalClientState(), ConditionalClientState()]
    state, _ = pooled_round(alg, state, [first_rows(c, 10) for c in clients[:2]], client_states, 1)
    drifted = [first_rows(clients[0], 10), first_rows(clients[1], 20)]  # client 1's next stage holds 20 rows
    state, uplinks = pooled_round(alg, state, drifted, client_states, 2)
    assert POOL not in uplinks[0] and uplinks[1][POOL]["x"].shape[0] == 20
    assert [len(state.pool[c].y) for c in (0, 1)] == [10, 20]


def test_the_pooled_protocol_needs_the_runs_training_settings():
    clients, _ = clients_of({"preset": "conditional/E1", "clusters": 2}, SYNTHETIC_28)
    alg = conditional(centralized_pool=True)  # built without `training`, as no run builds it
    with pytest.raises(ConfigError, match="centralized_pool"):
        pooled_round(alg, alg.init_state(), [first_rows(clients[0], 10)], [ConditionalClientState()], 1)


# -- whole runs --------------------------------------------------------------------------------------------


def run(algorithm: dict | str, model: str = "cnn_mnist", rounds: int = 1):
    return run_spec(
        resolve_run(
            {
                "task": "t",
                "dataset": SYNTHETIC_28,
                "model": model,
                "algorithm": algorithm,
                "rounds": rounds,
                "scenario": {"preset": "conditional/E1", "clusters": 2, "num_clients": 4},
                "local_epochs": 1,
                "batch_size": 64,
                "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.9},
            }
        )
    )


def test_whole_run_meters_fedavgs_uplink_plus_the_extra_input_columns():
    cond, plain = run("conditional"), run("fedavg")
    assert cond.status == "FINISHED" and plain.status == "FINISHED", (cond.reason, plain.reason)
    extra = cond.final[M.TOTAL_PREFIX + M.COMM_UP_BYTES] - plain.final[M.TOTAL_PREFIX + M.COMM_UP_BYTES]
    assert extra == 4 * 32 * 128 * 4  # 4 clients x 32 x 128 float32 weights, nothing else
    for key in (M.ACC_LOCAL_MEAN, M.ACC_TEST_TIME, M.ACC_SYSTEM):
        assert 0.0 <= cond.final[M.FINAL_PREFIX + key] <= 1.0


def test_whole_pooled_run_finishes(registered_cond_mlp):
    result = run_spec(
        resolve_run(
            {
                "task": "t",
                "dataset": "digits",
                "model": "cond_mlp",
                "algorithm": {"name": "conditional", "centralized_pool": True},
                "rounds": 3,
                "scenario": {"preset": "conditional/E1", "clusters": 2},
                "batch_size": 16,
                "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
            }
        )
    )
    assert result.status == "FINISHED", result.reason
    assert len(result.history) == 3 and result.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] > 0.5
    scenario = build_scenario(load_dataset("digits"), result.spec.scenario, result.spec.seed, 3)
    data_bytes = 4 * 64 * sum(len(v.train) for v in scenario.stages[0])  # every 8x8 float32 row, once
    uplinks = [record[M.COMM_UP_BYTES] for record in result.history]
    assert uplinks[0] > data_bytes and uplinks[1] == uplinks[2] < 1000, uplinks
