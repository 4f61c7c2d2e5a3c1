"""The base helpers every FedAvg-style method shares: the counted uplink and the sample-weighted average."""

import numpy as np

from fedbench.algorithms.base import SAMPLES, ModelBuilder, average_uplinks, counted, sample_counts
from fedbench.algorithms.fedavg import FedAvg
from fedbench.core.types import ClientResult, Payload


def test_counted_uplink_carries_the_sample_count_as_a_metered_section():
    uplink = counted({"w": np.zeros(3, dtype=np.float32)}, 5, {"profile": {"full": np.ones(2, dtype=np.float32)}})
    assert set(uplink.sections) == {"weights", SAMPLES, "profile"}
    assert uplink.nbytes == 12 + 8 + 8
    assert sample_counts([ClientResult(0, uplink)]) == [5]
    assert set(counted(None, 5).sections) == {SAMPLES}


def test_average_reads_only_the_weights_even_when_extras_share_their_names():
    """Extras are never averaged, whatever they are called: no method lists what to leave out."""
    results = [
        ClientResult(
            cid,
            counted(
                {"w": np.full(2, value, dtype=np.float32)},
                n,
                {"profile": {"w": np.full(4, 100.0)}, "cluster": {"id": np.array([cid])}},
            ),
        )
        for cid, value, n in ((0, 1.0, 1), (1, 5.0, 3))
    ]
    averaged = average_uplinks(results)
    assert set(averaged) == {"w"}
    np.testing.assert_allclose(averaged["w"], [4.0, 4.0])  # (1 * 1 + 3 * 5) / 4
    assert averaged["w"].dtype == np.float32


def test_a_shared_downlink_is_one_object():
    """FedAvg's configure hands every client the same Payload object: the runtime ships it once."""
    alg = FedAvg(FedAvg.Config(), ModelBuilder("mlp", (1, 8, 8), 10, (("hidden", (8,)),)), 3, seed=0)
    state = alg.init_state()
    payloads = alg.configure(1, state, [0, 1, 2])
    assert all(isinstance(p, Payload) and p is state.global_model for p in payloads.values())
