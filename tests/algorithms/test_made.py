"""MADE reweighting: weights near 1 on IID data, larger for locally rare samples, the two phases' payloads,
a whole run, and the density-phase cache (a second run with another task-model setting trains no MADE)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedbench.algorithms import made as made_module
from fedbench.algorithms.base import ModelBuilder, counted
from fedbench.algorithms.made import DENSITY, MADEClientState, MADEReweighting
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.state_codec import dumps, loads
from fedbench.core.types import WEIGHTS, ClientResult, OptimizerSpec, RoundContext
from fedbench.data import load_dataset
from fedbench.models import build_model, count_parameters
from fedbench.runtime import run_spec
from fedbench.training import ClientData
from tests.conftest import tiny_spec

NUM_CLIENTS = 4


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "made"


def digits():
    data = load_dataset("digits")
    return torch.from_numpy(np.array(data.x)), torch.from_numpy(data.y.astype(np.int64))


def client(x, y, idx) -> ClientData:
    return ClientData(x[idx], y[idx], x[idx[:10]], y[idx[:10]], y[idx], y[idx[:10]])


def make(**config) -> MADEReweighting:
    builder = ModelBuilder("mlp", (1, 8, 8), 10, (("hidden", (16,)),))
    small = {"made_hidden": (64,), "classifier_epochs": 20, "classifier_batch_size": 64}  # the defaults' cost / 4
    return MADEReweighting(MADEReweighting.Config(**{**small, **config}), builder, NUM_CLIENTS, seed=0)


def ctx(round: int, cid: int) -> RoundContext:
    return RoundContext(
        round=round,
        client_id=cid,
        seed=0,
        local_epochs=1,
        batch_size=32,
        optimizer=OptimizerSpec(lr=0.05),
        num_classes=10,
    )


def density_phase(alg: MADEReweighting, clients: list[ClientData]):
    """Run the density rounds through the server and client halves; returns (server state, client states)."""
    state, states = alg.init_state(), [MADEClientState() for _ in clients]
    for r in range(1, alg.config.density_rounds + 1):
        payloads = alg.configure(r, state, range(len(clients)))
        results = []
        for cid, data in enumerate(clients):
            uplink, states[cid], metrics = alg.client_update(payloads[cid], states[cid], data, ctx(r, cid))
            results.append(ClientResult(cid, uplink, metrics))
        state = alg.aggregate(r, state, results)
    return state, states


def weights_of(alg, state, data, cid):
    """(raw ratios, weights, labels) of a client's training samples under its fitted weighting."""
    weighting = alg.fit_weighting(state.made, data, ctx(alg.config.density_rounds + 1, cid))
    hook = alg.sample_weights(weighting, "cpu")
    x, y = data.train_batch(torch.arange(data.num_train))
    return hook.ratio(x), hook(x, y), y


@pytest.fixture(scope="module")
def iid_phase():
    x, y = digits()
    perm = np.random.default_rng(0).permutation(len(y))
    clients = [client(x, y, idx) for idx in np.array_split(perm, NUM_CLIENTS)]
    alg = make(cache=False)
    return alg, density_phase(alg, clients)[0], clients


def test_iid_clients_get_weights_near_one(iid_phase):
    """Local density ~ global density: the classifier cannot tell the MADEs apart (h ~ 1/2, ratio ~ 1)."""
    alg, state, clients = iid_phase
    for cid in (0, 1):
        ratio, weights, _ = weights_of(alg, state, clients[cid], cid)
        assert 0.8 < ratio.mean().item() < 1.25
        assert weights.mean().item() == pytest.approx(1.0, abs=0.05)
        assert weights.std().item() < 0.3


def test_a_fitted_weighting_loads_back_from_a_checkpoint_and_weighs_alike(iid_phase):
    """A client's state once its weighting is fitted (local MADE, classifier, rescaling constants) and the server's
    state survive the state codec; the loaded weighting gives the same sample weights, bit for bit."""
    alg, state, clients = iid_phase
    fitted = MADEClientState(weighting=alg.fit_weighting(state.made, clients[0], ctx(alg.config.density_rounds + 1, 0)))
    back = loads(dumps(fitted))
    x, y = clients[0].train_batch(torch.arange(clients[0].num_train))
    assert torch.equal(
        alg.sample_weights(back.weighting, "cpu")(x, y), alg.sample_weights(fitted.weighting, "cpu")(x, y)
    )
    server = loads(dumps(state))
    assert all(np.array_equal(server.made[k], v) for k, v in state.made.items()) and server.losses == state.losses


def test_minmax_rescaling_and_output_features(iid_phase):
    """FedDisk's min-max map sends the client's smallest ratio to 0 and its largest to 2; its output
    features (sigmoid means instead of log-conditionals) give weights in the same range."""
    _, state, clients = iid_phase
    _, weights, _ = weights_of(make(cache=False, rescale="minmax"), state, clients[0], 0)
    assert weights.min().item() == pytest.approx(0.0, abs=1e-6) and weights.max().item() == pytest.approx(2.0, rel=1e-5)
    _, weights, _ = weights_of(make(cache=False, features="outputs"), state, clients[0], 0)
    assert torch.isfinite(weights).all() and weights.min() >= 0.0 and weights.max() <= 2.0
    assert weights.std() > 0  # not a constant: the classifier's output varies with x


def test_locally_rare_class_gets_larger_weights():
    """Client 0 holds 160 zeros and 16 ones; the others hold the rest IID. Its ones are rare locally but not
    globally, so they are up-weighted relative to its zeros (003 Sec. IV)."""
    x, y = digits()
    perm = np.random.default_rng(0).permutation(len(y))
    labels = y.numpy()[perm]
    zeros, ones = perm[labels == 0][:160], perm[labels == 1][:16]
    rest = perm[~np.isin(perm, np.concatenate([zeros, ones]))]
    clients = [client(x, y, np.concatenate([zeros, ones]))] + [client(x, y, i) for i in np.array_split(rest, 3)]
    alg = make(cache=False)
    state, _ = density_phase(alg, clients)
    ratio, weights, labels = weights_of(alg, state, clients[0], 0)
    assert ratio.mean().item() < 0.5  # unlike the IID case, the MADEs are told apart
    assert weights[labels == 1].mean() > 1.5 * weights[labels == 0].mean()
    assert weights.min() >= 0.0 and weights.max() <= 2.0


def test_payloads_of_the_two_phases():
    alg = make(density_rounds=2)
    state = alg.init_state()
    down = alg.configure(1, state, [0, 1])
    assert down[0] is down[1] and set(down[0].sections) == {WEIGHTS}  # the MADE is the model being federated
    # FedAvg of the MADE, weighted by sample counts
    made = down[0].weights
    ups = [
        ClientResult(cid, counted({k: np.full_like(v, cid + 1.0) for k, v in made.items()}, n), {M.TRAIN_LOSS: 0.5})
        for cid, n in ((0, 1), (1, 3))
    ]
    state = alg.aggregate(1, state, ups)
    assert all(np.allclose(v, 1.75) for v in state.made.values())
    # after the phase: the task model to everyone, the final MADE only to clients that have not had it
    task = set(state.global_model.weights)
    first = alg.configure(3, state, [0, 1])
    assert set(first[0].sections) == {WEIGHTS, DENSITY}
    assert set(first[0].weights) == task and set(first[0][DENSITY]) == set(made)
    uplinks = [ClientResult(0, counted(state.global_model.weights, 5), {M.TRAIN_LOSS: 1.0})]
    state = alg.aggregate(3, state, uplinks)
    later = alg.configure(4, state, [0, 1])
    assert set(later[0].sections) == {WEIGHTS} and set(later[0].weights) == task
    assert set(later[1].sections) == set(first[1].sections)


def test_config_is_validated():
    with pytest.raises(ConfigError, match="^density_rounds: "):
        MADEReweighting.Config(density_rounds=0)
    with pytest.raises(ConfigError, match="^made_hidden: "):
        MADEReweighting.Config(made_hidden=())


RUN = {"name": "made", "density_rounds": 2, "made_hidden": [32], "classifier_epochs": 10, "classifier_batch_size": 64}


def spec(lr: float):
    return tiny_spec(
        algorithm=RUN,
        rounds=4,
        scenario={"partition": "dirichlet", "alpha": 0.5, "num_clients": 3},
        optimizer={"name": "sgd", "lr": lr, "momentum": 0.9},
    )


def test_whole_run_and_the_density_phase_cache(monkeypatch, isolated_cache):
    calls = []
    real = made_module.train_made

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(made_module, "train_made", counting)
    first = run_spec(spec(lr=0.05))
    assert first.status == "FINISHED", first.reason
    assert len(calls) == 2 * 3 + 2 * 3  # 2 density rounds x 3 clients, then 3 local MADEs of 2 rounds each
    acc = [r[M.ACC_LOCAL_MEAN] for r in first.history]
    assert acc[0] == acc[1] and acc[3] > acc[1] + 0.2  # the task model waits for the density phase, then trains
    made_bytes = 4 * count_parameters(build_model("made", (1, 8, 8), 10, hidden=[32]))
    assert first.history[0][M.COMM_DOWN_BYTES] == 3 * made_bytes  # the global MADE travels, metered
    assert first.history[0][M.COMM_UP_BYTES] == 3 * (made_bytes + 8)  # and comes back with the sample count
    entries = sorted(p for p in isolated_cache.rglob("*") if p.is_file())
    assert len(entries) == 1 + 2 + 3  # phase index, final MADE and losses, 3 client weightings
    stamps = {p: p.stat().st_mtime_ns for p in entries}

    calls.clear()
    second = run_spec(spec(lr=0.1))  # another task-model setting: the density phase is a cache hit
    assert second.status == "FINISHED", second.reason
    assert len(calls) == 3  # only round 1's MADE updates (they identify the federation), no local MADEs
    assert sorted(p for p in isolated_cache.rglob("*") if p.is_file()) == entries
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    for a, b in zip(first.history[:2], second.history[:2], strict=True):  # density rounds: same losses, same bytes
        assert a[M.TRAIN_LOSS_MEAN] == b[M.TRAIN_LOSS_MEAN]
        assert (a[M.COMM_UP_BYTES], a[M.COMM_DOWN_BYTES]) == (b[M.COMM_UP_BYTES], b[M.COMM_DOWN_BYTES])

    third = run_spec(spec(lr=0.05))  # the first run again, from the cache: the same numbers

    def timeless(h):
        return [{k: v for k, v in r.items() if not k.startswith("time_")} for r in h]

    assert timeless(third.history) == timeless(first.history)
