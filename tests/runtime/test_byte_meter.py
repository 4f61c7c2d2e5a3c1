"""ByteMeter: every array of every Payload section, once per receiving client, per direction."""

import numpy as np

from fedbench.core import metrics as M
from fedbench.core.types import ClientResult, Payload
from fedbench.runtime.byte_meter import ByteMeter


def test_every_section_is_metered_and_a_shared_payload_counts_once_per_receiver():
    shared = Payload({"w": np.zeros(10, dtype=np.float32)}, {"bounds": {"box": np.zeros(2)}})
    meter = ByteMeter()
    meter.downlink({0: shared, 1: shared, 2: Payload()})
    extras = {"samples": {"n": np.array([3])}, "profile": {"p": np.zeros(4, np.float32)}}
    uplink = Payload({"w": np.zeros(10, dtype=np.float32)}, extras)
    meter.uplink([ClientResult(0, uplink), ClientResult(1, Payload())])
    meter.downlink({0: shared}, channel=M.COMM_EVAL_DOWN_BYTES)
    assert meter.take_round() == {
        M.COMM_UP_BYTES: 40 + 8 + 16,
        M.COMM_DOWN_BYTES: 2 * 56,
        M.COMM_EVAL_DOWN_BYTES: 56,
        M.COMM_EVAL_UP_BYTES: 0,
    }
    assert meter.per_client[(0, M.COMM_DOWN_BYTES)] == 56 and meter.per_client[(2, M.COMM_DOWN_BYTES)] == 0
    assert meter.take_round() == {
        M.COMM_UP_BYTES: 0,
        M.COMM_DOWN_BYTES: 0,
        M.COMM_EVAL_DOWN_BYTES: 0,
        M.COMM_EVAL_UP_BYTES: 0,
    }


def test_a_relayed_peer_payload_is_one_transfer_charged_to_sender_and_receiver():
    model = {"w": np.zeros(4, dtype=np.float32)}  # 16 bytes
    from_1_and_2 = Payload(peers={1: Payload(model), 2: Payload(model)})
    meter = ByteMeter()
    meter.downlink({0: from_1_and_2, 3: Payload(peers={1: Payload(model)})})
    assert meter.take_round() == {
        M.COMM_UP_BYTES: 3 * 16,
        M.COMM_DOWN_BYTES: 3 * 16,
        M.COMM_EVAL_DOWN_BYTES: 0,
        M.COMM_EVAL_UP_BYTES: 0,
    }
    assert meter.per_client[(1, M.COMM_UP_BYTES)] == 32  # client 1's model went to two peers
    assert meter.per_client[(2, M.COMM_UP_BYTES)] == 16 and meter.per_client[(0, M.COMM_DOWN_BYTES)] == 32
    meter.downlink({0: from_1_and_2}, channel=M.COMM_EVAL_DOWN_BYTES)  # evaluation traffic is the receiver's only
    assert meter.take_round()[M.COMM_UP_BYTES] == 0


def test_relayed_payloads_are_kept_by_sender_and_share_their_arrays():
    a, b = Payload({"w": np.ones(2)}, {"samples": {"n": np.array([5])}}), Payload({"w": np.zeros(2)})
    relayed = Payload(peers={7: a, 3: b})
    assert not relayed.sections  # every array is a peer's
    back = relayed.peers
    assert sorted(back) == [3, 7]
    assert sorted(back[7].sections) == ["samples", "weights"] and sorted(back[3].sections) == ["weights"]
    assert back[7]["samples"]["n"] is a["samples"]["n"] and back[3].weights["w"] is b.weights["w"]
