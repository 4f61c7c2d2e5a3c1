"""FEROMA: the profile extractor's maths, the mapping's weights on cases with a known answer, both halves on
hand-made clients, and short whole runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedbench.algorithms import feroma_profile as dpe
from fedbench.algorithms.base import ModelBuilder
from fedbench.algorithms.capabilities import TrainedOn
from fedbench.algorithms.feroma import (
    CONDITIONAL,
    EXTRACTOR,
    FULL,
    MARGINAL,
    PROFILE,
    Feroma,
    FeromaClientState,
    FeromaConfig,
    FeromaState,
    TrainedModel,
    association_weights,
)
from fedbench.config.task import resolve_run
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.state_codec import dumps, loads
from fedbench.core.types import WEIGHTS, ClientResult, OptimizerSpec, Payload, RoundContext
from fedbench.runtime import run_spec
from fedbench.training import ClientData
from tests.conftest import tiny_spec

FEATURES, CLASSES = 12, 4


def ctx(round: int, client: int = 0) -> RoundContext:
    return RoundContext(
        round=round,
        client_id=client,
        seed=0,
        local_epochs=1,
        batch_size=16,
        optimizer=OptimizerSpec(lr=0.05),
        num_classes=CLASSES,
    )


def algorithm(**config) -> Feroma:
    """FEROMA on a linear model over 12 features: its latents (`fc_input`) are the raw inputs."""
    builder = ModelBuilder("mlp", (FEATURES,), CLASSES, (("hidden", ()),))
    return Feroma(FeromaConfig(**{"warmup_rounds": 1, **config}), builder, num_clients=3, seed=0)


def client_data(group: str, n: int = 60, seed: int = 0) -> ClientData:
    """Group A: classes 0-1, signal on features 0-5; group B: classes 2-3, signal on features 6-11."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (2 * n,), generator=g) + (0 if group == "A" else 2)
    x = 0.1 * torch.rand(2 * n, FEATURES, generator=g)
    cols = slice(0, 6) if group == "A" else slice(6, 12)
    x[:, cols] += 0.5 + 0.3 * (y % 2)[:, None].float()
    return ClientData(x[:n], y[:n], x[n:], y[n:], y[:n].clone(), y[n:].clone())


def frozen_state(alg: Feroma, groups: dict[int, str]) -> FeromaState:
    """Server state after warm-up round 1: FedAvg of the clients' models, extractor and box frozen."""
    state = alg.init_state()
    results = []
    for cid, group in groups.items():
        data = client_data(group, seed=cid)
        uplink, _, _ = alg.client_update(state.global_model, FeromaClientState(), data, ctx(1, cid))
        results.append(ClientResult(cid, uplink))
    return alg.aggregate(1, state, results)


def mapping_round(
    alg: Feroma, r: int, state: FeromaState, client_states: dict, data_of: dict[int, ClientData], mark=None
) -> tuple[FeromaState, dict[int, Payload], dict[int, Payload]]:
    """Round `r` after the warm-up as the runtime runs it: the clients profile their data, the server maps, each
    trains the model built for it on that same data (`mark` may stamp the returned weights), the server aggregates.
    Returns the state and what was sent: the profile requests and the models."""
    clients = sorted(data_of)
    requests, described = alg.round_describe_payloads(r, state, clients), []
    for cid in clients:
        uplink, client_states[cid] = alg.client_describe_round(
            requests[cid], client_states[cid], data_of[cid], ctx(r, cid)
        )
        described.append(ClientResult(cid, uplink))
    state = alg.receive_descriptions(r, state, described)
    payloads, results = alg.configure(r, state, clients), []
    for cid in clients:
        uplink, client_states[cid], _ = alg.client_update(payloads[cid], client_states[cid], data_of[cid], ctx(r, cid))
        results.append(ClientResult(cid, mark(cid, uplink) if mark else uplink))
    return alg.aggregate(r, state, results), requests, payloads


def stamped(fill_of: dict[int, float]):
    """A `mark` that fills client cid's returned weights with `fill_of[cid]`, to tell later which model is whose."""
    return lambda cid, uplink: uplink.replace(
        {WEIGHTS: {k: np.full_like(v, fill_of[cid]) for k, v in uplink.weights.items()}}
    )


# -- the profile extractor ------------------------------------------------------------------------------
def test_warmup_end_freezes_the_global_model_and_a_box_from_the_clients_maxima():
    alg = algorithm()
    state = frozen_state(alg, {0: "A", 1: "B"})
    assert state.extractor.weights is state.global_model.weights
    lower, upper = state.extractor.bounds
    assert lower == 0.0  # the inputs are non-negative
    x_max = max(float(client_data(g, seed=c).train_x.max()) for c, g in {0: "A", 1: "B"}.items())
    assert upper == pytest.approx(1.02 * x_max)


def test_profile_has_2c_plus_2c2_values_and_costs_under_one_percent_of_a_lenet5_update():
    """MNIST-shaped clients and LeNet-5 (10 classes): the uplink of a mapping round is the model, its sample
    count and a 220-float profile; 002 App. G reports +0.35% on MNIST / LeNet-5."""
    alg = Feroma(FeromaConfig(warmup_rounds=1), ModelBuilder("lenet5", (1, 28, 28), 10), num_clients=1, seed=0)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, 256, (80, 1, 28, 28), dtype=torch.uint8, generator=g), torch.arange(80) % 10
    data = ClientData(x[:40], y[:40], x[40:], y[40:], y[:40].clone(), y[40:].clone())
    state = alg.init_state()
    uplink, _, _ = alg.client_update(state.global_model, FeromaClientState(), data, ctx(1))
    state = alg.aggregate(1, state, [ClientResult(0, uplink)])
    client_states = {0: FeromaClientState()}
    state, _, _ = mapping_round(alg, 2, state, client_states, {0: data})
    request = alg.round_describe_payloads(3, state, [0])[0]
    described, client_states[0] = alg.client_describe_round(request, client_states[0], data, ctx(3))
    assert set(described.sections) == {PROFILE}
    state = alg.receive_descriptions(3, state, [ClientResult(0, described)])
    uplink, _, _ = alg.client_update(alg.configure(3, state, [0])[0], client_states[0], data, ctx(3))
    profile = described[PROFILE][FULL]
    assert profile.shape == (2 * 10 + 2 * 10**2,) and profile.dtype == np.float32
    overhead = described.nbytes / uplink.nbytes  # the round's profile beside its model and sample count
    assert overhead < 0.01


def test_shared_projection_is_identical_everywhere_and_clips_into_the_box():
    a = dpe.shared_projection(0.0, 3.0, 40, 5, seed=7)
    b = dpe.shared_projection(0.0, 3.0, 40, 5, seed=7)
    np.testing.assert_array_equal(a.components, b.components)
    np.testing.assert_allclose(a.components @ a.components.T, np.eye(5), atol=1e-10)
    assert (a.components[np.arange(5), np.abs(a.components).argmax(axis=1)] > 0).all()
    x = np.full((1, 40), 10.0)
    np.testing.assert_allclose(a(x), a(np.full((1, 40), 3.0)))


def test_moments_are_exact_without_subsampling_and_absent_classes_get_the_sentinel():
    z = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]])
    labels = np.array([0, 0, 1, 2])
    full = np.ones((1, 4))
    marginal = dpe.marginal_moments(z, full, sentinel=-1.0)
    np.testing.assert_allclose(marginal, [3.0, 4.0, np.sqrt(5.0), np.sqrt(5.0)])
    cond = dpe.conditional_moments(z, labels, full, num_classes=4, sentinel=-1.0)
    means, stds = cond[:8].reshape(4, 2), cond[8:].reshape(4, 2)
    np.testing.assert_allclose(means[0], [1.0, 2.0])
    np.testing.assert_allclose(stds[0], [1.0, 1.0])
    assert (means[1:] == -1.0).all() and (stds[1:] == -1.0).all()  # one sample (classes 1, 2) or none (3)


def test_subsampling_variants():
    rng = np.random.default_rng(0)
    paper = dpe.sample_weights(1000, "paper", masks=3, prob=0.5, rng=rng)
    assert paper.shape == (3, 1000) and set(np.unique(paper)) == {0.0, 1.0} and abs(paper.mean() - 0.5) < 0.05
    released = dpe.sample_weights(1000, "released", masks=3, prob=0.5, rng=rng)
    assert released.shape == (1, 1000) and released.sum() == 1500 and released.max() <= 3


def test_laplace_noise_has_variance_2b2():
    b = dpe.laplace_scale(0.0, 4.0, n=50, epsilon=0.5)
    assert b == pytest.approx(4.0 / 50 / 0.5)
    noise = dpe.privatize(np.zeros(400_000), b, np.random.default_rng(1))
    assert noise.mean() == pytest.approx(0.0, abs=0.003)
    assert noise.var() == pytest.approx(2 * b**2, rel=0.02)
    assert dpe.laplace_scale(0.0, 4.0, 50, None) == 0.0 and dpe.laplace_scale(0.0, 4.0, 50, float("inf")) == 0.0


def test_block_scaler_maps_each_block_to_unit_range_and_scales_a_label_free_part_alike():
    profiles = np.array([[0.0, 2.0, 10.0, 30.0], [1.0, 4.0, 20.0, 10.0]])
    scaler = dpe.BlockScaler.fit(profiles, k=2)
    np.testing.assert_allclose(scaler(profiles), [[0.0, 0.5, 0.0, 1.0], [0.25, 1.0, 0.5, 0.0]])
    np.testing.assert_allclose(scaler(profiles[:, :2]), [[0.0, 0.5], [0.25, 1.0]])


# -- the mapping ----------------------------------------------------------------------------------------
def two_groups(seed: int, noise: float = 0.01) -> np.ndarray:
    """Rows 0-2 near one direction, rows 3-5 near an orthogonal one (a fresh draw per seed, as profiles of
    the same data differ from round to round)."""
    rng = np.random.default_rng(seed)
    a, b = np.r_[np.ones(4), np.zeros(4)], np.r_[np.zeros(4), np.ones(4)]
    return np.stack([a, a, a, b, b, b]) + noise * rng.random((6, 8))


@pytest.mark.parametrize("variant", ["paper", "released"])
def test_two_groups_give_block_diagonal_weights(variant):
    w, kinds = association_weights(two_groups(1), two_groups(0), np.ones(6), variant, "mean", False)
    assert (w[:3, 3:] == 0).all() and (w[3:, :3] == 0).all()
    assert (w[:3, :3] > 0).sum() >= 6 and (w[3:, 3:] > 0).sum() >= 6  # most of each block shared
    np.testing.assert_allclose(w.sum(axis=1), 1.0)
    assert "global" not in kinds


def test_without_threshold_the_released_weights_still_concentrate_on_the_own_group():
    w, kinds = association_weights(two_groups(1), two_groups(0), np.ones(6), "released", None, False)
    assert w[:3, :3].sum() > 0.99 * 3 and kinds == ["global"] * 6  # every weight positive: weighted global


@pytest.mark.parametrize("tau", [None, "mean"])
def test_identical_profiles_give_uniform_weights(tau):
    profiles = np.tile(np.arange(1.0, 9.0), (5, 1))
    w, kinds = association_weights(profiles, profiles, np.ones(5), "paper", tau, False)
    np.testing.assert_allclose(w, 0.2)
    assert kinds == ["global"] * 5


@pytest.mark.parametrize("variant", ["paper", "released"])
def test_one_perfect_match_gives_a_one_hot_row(variant):
    previous = 2.0 * np.eye(5, 8)  # pairwise orthogonal profiles
    current = previous[[2]]
    w, kinds = association_weights(current, previous, np.ones(5), variant, "mean", False)
    np.testing.assert_array_equal(w, [[0, 0, 1, 0, 0]])
    assert kinds == ["personalized"]


def test_no_surviving_weight_falls_back_to_the_plain_average_and_sizes_weigh_in():
    previous = np.eye(4)
    w, kinds = association_weights(np.ones((1, 4)), previous, np.array([1.0, 1.0, 1.0, 5.0]), "paper", 0.9, True)
    np.testing.assert_allclose(w, [[1 / 8, 1 / 8, 1 / 8, 5 / 8]])
    assert kinds == ["global"]


def test_drifted_client_gets_the_model_trained_on_its_new_distribution():
    """Round 2 (the first mapping round): 0 on A, 1 and 2 on B, all given the warm-up model, each returns a model
    trained on its data. Round 3: client 2 now holds A, and its profile of this round maps it to client 0's A
    model, which it then trains on A in the same round. Profiles come from the real extractor."""
    alg = algorithm(tau="mean")
    before, now = {0: "A", 1: "B", 2: "B"}, {0: "A", 1: "B", 2: "A"}
    state, client_states = frozen_state(alg, before), {cid: FeromaClientState() for cid in before}
    data = {cid: client_data(group, seed=cid) for cid, group in before.items()}
    state, requests, payloads = mapping_round(
        alg, 2, state, client_states, data, stamped({cid: float(g == "A") for cid, g in before.items()})
    )
    assert all(EXTRACTOR in requests[cid] for cid in before)  # the extractor comes with the first profile request
    assert all(payloads[cid] is state.global_model or payloads[cid] == payloads[0] for cid in before)
    assert alg.round_metrics(state) == {"feroma_clustered": 0.0, "feroma_personalized": 0.0, "feroma_global": 3.0}
    assert {j: state.trained[j].round for j in before} == {0: 2, 1: 2, 2: 2} and state.returned == (0, 1, 2)

    data = {cid: client_data(group, seed=10 + cid) for cid, group in now.items()}
    state, requests, payloads = mapping_round(alg, 3, state, client_states, data)
    assert all(EXTRACTOR not in requests[cid] for cid in now)  # the extractor is sent once
    assert (payloads[2].weights["head.weight"] == 1.0).all()  # client 0's A model, for client 2's A data now
    assert (payloads[1].weights["head.weight"] == 0.0).all()  # the B models
    metrics = alg.round_metrics(state)
    assert metrics["feroma_personalized"] == 2.0 and metrics["feroma_clustered"] == 1.0
    assert alg.evaluation_payloads(state, [2])[2] is state.trained[2].model  # trained on A in round 3


def test_a_test_client_of_a_distribution_that_appears_only_in_the_last_round_gets_the_model_trained_on_it():
    """Round 2 every client holds A; in round 3, the last, client 0 drifts to B. A test client holding B is given
    client 0's model trained on B in round 3 (002: test clients match the final round's profiles and models), not a
    model of the stage before, which no client trained on B."""
    alg = algorithm()
    state, client_states = frozen_state(alg, {0: "A", 1: "A"}), {0: FeromaClientState(), 1: FeromaClientState()}
    state, _, _ = mapping_round(
        alg, 2, state, client_states, {0: client_data("A", seed=1), 1: client_data("A", seed=2)}
    )
    state, _, _ = mapping_round(
        alg, 3, state, client_states, {0: client_data("B", seed=3), 1: client_data("A", seed=4)}
    )
    request = alg.describe_payloads(state, [10])[10]
    out = alg.assign(state, {10: alg.client_describe(request, client_data("B", seed=5), ctx(3))})
    assert out.matched == {10: TrainedOn(0, 3)} and out.payloads[10] is state.trained[0].model


# -- test time ------------------------------------------------------------------------------------------
def test_assign_gives_the_model_of_the_nearest_profile_on_the_parts_sent():
    alg = algorithm()
    k = CLASSES
    marginal = np.zeros(2 * k)
    pa = np.r_[marginal, np.full(2 * CLASSES * k, 1.0)]
    pb = np.r_[marginal + 5.0, np.full(2 * CLASSES * k, 1.0)]
    pc = np.r_[marginal, np.full(2 * CLASSES * k, -1.0)]  # same marginal as a, other conditional part
    models = {j: Payload({"head.weight": np.full((1,), float(j))}) for j in range(3)}
    state = FeromaState(Payload(), trained={j: TrainedModel(p, models[j], round=5) for j, p in enumerate((pa, pb, pc))})
    descriptions = {
        10: Payload(extras={PROFILE: {MARGINAL: (marginal + 4.5).astype(np.float32)}}),
        11: Payload(
            extras={
                PROFILE: {
                    MARGINAL: marginal.astype(np.float32),
                    CONDITIONAL: np.full(2 * CLASSES * k, -0.9, dtype=np.float32),
                }
            }
        ),
        12: Payload(),
    }
    out = alg.assign(state, descriptions)
    assert out.matched == {10: TrainedOn(1, 5), 11: TrainedOn(2, 5)}
    assert out.payloads[10] is models[1] and out.payloads[11] is models[2] and out.payloads[12] is state.global_model


def test_the_mapping_state_loads_back_from_a_checkpoint_and_assigns_the_same_models():
    """After two mapping rounds of the released variant the server state holds all FEROMA keeps (extractor,
    profiles, personal and trained models, the fitted scaler); it survives the state codec, and test time on the
    loaded state matches the same test client to the same model."""
    alg = algorithm(variant="released")
    groups = {0: "A", 1: "B"}
    state, client_states = frozen_state(alg, groups), {cid: FeromaClientState() for cid in groups}
    for r in (2, 3):
        data = {cid: client_data(group, seed=10 * r + cid) for cid, group in groups.items()}
        state, _, _ = mapping_round(alg, r, state, client_states, data)
    assert state.scaler is not None and sorted(state.trained) == [0, 1]
    back = loads(dumps(state))
    assert isinstance(back, FeromaState) and isinstance(back.scaler, dpe.BlockScaler)
    np.testing.assert_array_equal(back.scaler.span, state.scaler.span)
    assert all(isinstance(back.trained[j], TrainedModel) for j in groups)
    np.testing.assert_array_equal(back.trained[1].profile, state.trained[1].profile)
    request = alg.describe_payloads(back, [10])[10]
    descriptions = {10: alg.client_describe(request, client_data("B", seed=7), ctx(4))}
    assert alg.assign(back, descriptions).matched == alg.assign(state, descriptions).matched == {10: TrainedOn(1, 3)}
    assert back.returned == state.returned == (0, 1) and back.equipped == (0, 1)


def test_client_describe_profiles_test_inputs_without_their_labels_and_labelled_samples_when_given():
    alg = algorithm()
    state = frozen_state(alg, {0: "A", 1: "B"})
    request = alg.describe_payloads(state, [0])[0]
    data = client_data("B")
    shuffled = ClientData(
        data.train_x[:0],
        data.train_y[:0],
        data.test_x,
        data.test_y[torch.randperm(len(data.test_y))],
        data.train_source_y[:0],
        data.test_source_y,
    )
    plain = alg.client_describe(
        request,
        ClientData(
            data.train_x[:0], data.train_y[:0], data.test_x, data.test_y, data.train_source_y[:0], data.test_source_y
        ),
        ctx(5),
    )
    assert set(plain.sections) == {PROFILE} and set(plain[PROFILE]) == {MARGINAL}
    assert plain[PROFILE][MARGINAL].shape == (2 * CLASSES,)
    np.testing.assert_array_equal(
        alg.client_describe(request, shuffled, ctx(5))[PROFILE][MARGINAL], plain[PROFILE][MARGINAL]
    )
    labelled = alg.client_describe(request, data, ctx(5))
    assert labelled[PROFILE][CONDITIONAL].shape == (2 * CLASSES * CLASSES,)


# -- configuration and whole runs -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "field, value",
    [
        ("warmup_rounds", 0),
        ("masks", 0),
        ("mask_prob", 0.0),
        ("epsilon", -1.0),
        ("tau", 1.5),
        ("bound_margin", 0.9),
        ("pca_points", 1),
    ],
)
def test_bad_config_values_are_refused(field, value):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        FeromaConfig(**{field: value})


@pytest.mark.parametrize(
    "variant, preset", [("paper", "feroma/label_skew/medium"), ("released", "feroma/conditional_label_skew/low")]
)  # 20 labels per class
def test_short_drifting_run_finishes_and_reports_mapping_and_test_time(variant, preset):
    spec = resolve_run(
        {
            "task": "t",
            "dataset": {"name": "synthetic_images", "train_samples": 1500, "test_samples": 300},
            "model": "lenet5",
            "algorithm": {"name": "feroma", "warmup_rounds": 1, "variant": variant, "tau": "mean", "epsilon": 10.0},
            "scenario": {"preset": preset, "num_clients": 4, "drift_every": 1},
            "rounds": 4,
            "local_epochs": 1,
            "batch_size": 32,
            "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
        }
    )
    result = run_spec(spec)
    assert result.status == "FINISHED", result.reason
    profile_bytes = 4 * dpe.profile_size(10, 10)
    models = (
        result.history[0][M.COMM_UP_BYTES] - 4 * 2 * 8
    )  # round W: models, samples and the latents' ranges (2 float64)
    assert [rec[M.COMM_UP_BYTES] for rec in result.history[1:]] == [models + 4 * profile_bytes] * 3  # model + profile
    assert all(np.isfinite(rec[M.TRAIN_LOSS_MEAN]) for rec in result.history)  # round W+1 trains too
    counts = [sum(rec[f"feroma_{k}"] for k in ("clustered", "personalized", "global")) for rec in result.history]
    assert counts == [4.0] * 4
    assert 0.0 <= result.final[M.FINAL_PREFIX + M.ACC_TEST_TIME] <= 1.0
    assert M.FINAL_PREFIX + M.ACC_ASSOCIATION in result.final


def test_contract_defaults_run_as_fedavg_during_warmup():
    result = run_spec(tiny_spec(algorithm="feroma", rounds=2))
    assert result.status == "FINISHED", result.reason
    assert all(rec["feroma_global"] == 4.0 for rec in result.history)
