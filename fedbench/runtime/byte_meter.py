"""The one place communication is counted: every array of every Payload, per client, per direction.

Decentralized methods are simulated through the server as a relay: a client's uplink only parks its model
there (not metered: no real network carries it), and what a receiver gets from a peer arrives in its downlink's
`Payload.peers[sender]`, charged as one transfer to both ends: the receiver's downlink and the sender's uplink.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from fedbench.core import metrics as M
from fedbench.core.types import ClientResult, Payload

CHANNELS = (M.COMM_UP_BYTES, M.COMM_DOWN_BYTES, M.COMM_EVAL_DOWN_BYTES, M.COMM_EVAL_UP_BYTES)


class ByteMeter:
    """Sums numel * element size of the arrays that travel. Algorithms never count bytes themselves.

    A payload shared by several clients is counted once per receiving client: each receives a copy.
    """

    def __init__(self) -> None:
        self._round: dict[str, int] = defaultdict(int)
        self.per_client: dict[tuple[int, str], int] = defaultdict(int)

    def downlink(self, payloads: Mapping[int, Payload], channel: str = M.COMM_DOWN_BYTES) -> None:
        """What each receiver gets; on the training channel what a peer sent it is also the sender's upload."""
        for cid, payload in payloads.items():
            self._count(cid, channel, payload.nbytes)
            if channel == M.COMM_DOWN_BYTES:
                for sender, sent in payload.peers.items():
                    self._count(sender, M.COMM_UP_BYTES, sent.nbytes)

    def uplink(self, results: Iterable[ClientResult], channel: str = M.COMM_UP_BYTES) -> None:
        for result in results:
            self._count(result.client_id, channel, result.uplink.nbytes)

    def _count(self, cid: int, channel: str, n: int) -> None:
        self._round[channel] += n
        self.per_client[(cid, channel)] += n

    def take_round(self) -> dict[str, float]:
        """This round's totals per channel (all channels present, zeros included); resets the round."""
        out = {k: float(self._round.get(k, 0)) for k in CHANNELS}
        self._round.clear()
        return out
