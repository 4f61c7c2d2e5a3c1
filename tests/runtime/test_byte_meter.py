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
    assert meter.take_round() == {M.COMM_UP_BYTES: 40 + 8 + 16, M.COMM_DOWN_BYTES: 2 * 56, M.COMM_EVAL_DOWN_BYTES: 56}
    assert meter.per_client[(0, M.COMM_DOWN_BYTES)] == 56 and meter.per_client[(2, M.COMM_DOWN_BYTES)] == 0
    assert meter.take_round() == {M.COMM_UP_BYTES: 0, M.COMM_DOWN_BYTES: 0, M.COMM_EVAL_DOWN_BYTES: 0}
