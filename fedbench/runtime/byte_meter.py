"""The one place communication is counted: every array of every Payload section, per client, per direction."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping

from fedbench.core import metrics as M
from fedbench.core.types import ClientResult, Payload


class ByteMeter:
    """Sums numel * element size of the arrays that travel. Algorithms never count bytes themselves.

    A payload shared by several clients is counted once per receiving client: each receives a copy.
    """

    def __init__(self) -> None:
        self._round: dict[str, int] = defaultdict(int)
        self.per_client: dict[tuple[int, str], int] = defaultdict(int)

    def downlink(self, payloads: Mapping[int, Payload], channel: str = M.COMM_DOWN_BYTES) -> None:
        for cid, payload in payloads.items():
            n = payload.nbytes
            self._round[channel] += n
            self.per_client[(cid, channel)] += n

    def uplink(self, results: Iterable[ClientResult]) -> None:
        for result in results:
            n = result.uplink.nbytes
            self._round[M.COMM_UP_BYTES] += n
            self.per_client[(result.client_id, M.COMM_UP_BYTES)] += n

    def take_round(self) -> dict[str, float]:
        """This round's totals per channel (all channels present, zeros included); resets the round."""
        out = {k: float(self._round.get(k, 0)) for k in (M.COMM_UP_BYTES, M.COMM_DOWN_BYTES, M.COMM_EVAL_DOWN_BYTES)}
        self._round.clear()
        return out
