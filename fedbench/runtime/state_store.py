"""Per-client state between rounds, outside the stateless workers.

On the serial backend it holds the ClientState values; on Ray it holds ObjectRefs to them, so a state
stays in the object store and moves only to the worker that runs that client next (a worker that dies
takes no state with it).
"""

from __future__ import annotations

from typing import Any


class StateStore:
    """client id -> ClientState (or a reference to one). A client never seen has None: the worker gives it the
    algorithm's fresh `ClientState`."""

    def __init__(self) -> None:
        self._states: dict[int, Any] = {}

    def get(self, client_id: int) -> Any:
        return self._states.get(client_id)

    def put(self, client_id: int, state: Any) -> None:
        self._states[client_id] = state

    def items(self) -> list[tuple[int, Any]]:
        """(client id, state or reference) for every client that has a state, in client-id order."""
        return sorted(self._states.items())

    def __len__(self) -> int:
        return len(self._states)
