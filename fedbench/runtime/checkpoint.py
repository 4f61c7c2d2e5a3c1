"""Checkpoints inside a run, so that a run killed in round 18 of 20 goes on from its last checkpoint, not round 1.

After every `every`-th round a run writes what its next round starts from: the round reached, the server state,
every client's state, the round records so far and the per-client rows (`fedbench.core.state_codec`: arrays and
the tree as JSON, no pickled code). No random generator position needs keeping: every draw of a run is seeded
by (run seed, round, client, purpose) (`fedbench.core.types.derive_seed`), so the round is the position, and a
resumed run ends with the numbers of an uninterrupted one (tests/runtime/test_checkpoint.py kills runs to check).
A folder keeps the last `keep` checkpoints (a kill while one is being written leaves the one before), written
under a temporary name, synced to disk and renamed, so a checkpoint on disk is whole even after a crash; the folder
goes once the run ends. A checkpoint that cannot be read (cut short, corrupted) or does not agree with itself (a
round at or past the run's last, a history of another length) is refused with a warning naming the file, and the
one before is used.
"""

from __future__ import annotations

import os
import shutil
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError

UNREADABLE = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, TypeError)
"""What reading a cut-short or corrupted checkpoint raises: a truncated zip, a broken tree, a class the codec
refuses (`StateCodecError`, a TypeError: the codec imports torch, which the CLI does not load)."""

CHECKPOINT_EVERY = 5
"""Rounds between two checkpoints of a run by default (`fedbench run --checkpoint-every`)."""
CHECKPOINTS_KEPT = 2
"""Checkpoints a run keeps: the newest, and the one before in case the newest was cut short."""


def checkpoint_interval(field: str, every: int | None) -> int:
    """Rounds between checkpoints: `every`, or CHECKPOINT_EVERY for None; 0 means none. Refuses anything else,
    naming `field` (the option it came from)."""
    every = CHECKPOINT_EVERY if every is None else every
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise ConfigError(field, every, "a whole number of rounds >= 0 (0: no checkpoints)")
    return every


@dataclass
class RunCheckpoint:
    """What a run's next round starts from."""

    run_hash: str
    round: int
    """The last round run."""
    server: Any
    """The algorithm's server `State` after that round."""
    clients: dict[int, Any]
    """Each client's `ClientState` (clients that never ran a job have none)."""
    history: list[dict[str, float]]
    """The round records of rounds 1..round, as the callbacks got them."""
    per_client: dict[str, Any] = field(default_factory=dict)
    """The per-client rows so far (`fedbench.runtime.per_client`)."""
    scored: Any = None
    """The round the final scores will come from so far (`ScoredRound`, `RunSpec.scored_round`), None: the last."""
    wall_s: float = 0.0
    """Seconds the run had taken when it wrote this (every attempt before it included): a resumed run's wall time
    counts them, as its compute time counts the rounds they ran."""


class CheckpointFolder:
    """One run's checkpoints, `round-0005.npz`, ..., in `folder`; written every `every` rounds, the last `keep` kept."""

    def __init__(self, folder: Path, every: int = CHECKPOINT_EVERY, keep: int = CHECKPOINTS_KEPT):
        if every < 1 or keep < 1:
            raise ValueError(f"checkpoints every {every} rounds, {keep} kept: both must be at least 1")
        self.folder, self.every, self.keep = Path(folder), every, keep

    def due(self, round: int, last_round: int) -> bool:
        """Whether `round` ends with a checkpoint (never the last: the run's result is recorded then)."""
        return round % self.every == 0 and round < last_round

    def save(self, checkpoint: RunCheckpoint) -> Path:
        from fedbench.core.state_codec import dumps  # torch: imported by the runs that checkpoint, not by the CLI

        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"round-{checkpoint.round:04d}.npz"
        partial = path.with_name(path.name + ".partial")
        with open(partial, "wb") as out:
            out.write(dumps(checkpoint))
            out.flush()
            os.fsync(out.fileno())  # on disk before the rename: a crash cannot leave a named, cut-short checkpoint
        os.replace(partial, path)
        for old in self._written()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def written(self, round: int) -> Path | None:
        """The checkpoint file written after `round`, None when there is none."""
        path = self.folder / f"round-{round:04d}.npz"
        return path if path.is_file() else None

    def adopt(self, folder: Path) -> None:
        """Take the checkpoint files of another folder (a Tune trial's, restored after its process died)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for path in Path(folder).glob("round-*.npz"):
            shutil.copy2(path, self.folder / path.name)

    def latest(self, run_hash: str, rounds: int | None = None) -> RunCheckpoint | None:
        """The newest whole checkpoint of run `run_hash` (of `rounds` rounds) here that agrees with itself, None
        when there is none; each one passed over is named in a warning, with why."""
        from fedbench.core.state_codec import loads

        for path in reversed(self._written()):
            try:
                checkpoint = loads(path.read_bytes())
            except UNREADABLE as exc:
                why = f"{type(exc).__name__}: {exc}"
                warnings.warn(f"checkpoint {path} cannot be read ({why}); using the one before", stacklevel=2)
                continue
            if not isinstance(checkpoint, RunCheckpoint) or checkpoint.run_hash != run_hash:
                continue
            problem = disagreement(checkpoint, rounds)
            if problem:
                warnings.warn(f"checkpoint {path} refused: {problem}; using the one before", stacklevel=2)
                continue
            return checkpoint
        return None

    def clear(self) -> None:
        """Forget the run's checkpoints (it ended: its result is recorded)."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def _written(self) -> list[Path]:
        return sorted(self.folder.glob("round-*.npz")) if self.folder.is_dir() else []


def disagreement(checkpoint: RunCheckpoint, rounds: int | None) -> str | None:
    """Why `checkpoint` cannot be what a run of `rounds` rounds wrote, None where it can: its round must be one the
    run checkpoints (1 up to the one before its last) and its history hold exactly the records of rounds 1..round."""
    reached = checkpoint.round
    if not isinstance(reached, int) or reached < 1 or (rounds is not None and reached >= rounds):
        last = f"1..{rounds - 1}" if rounds is not None else "a round >= 1"
        return f"it claims round {reached!r}, and a run of {rounds} rounds checkpoints {last}"
    recorded = [record.get(M.ROUND) for record in checkpoint.history]
    if recorded != [float(r) for r in range(1, reached + 1)]:
        return f"it claims round {reached} but holds the records of rounds {_span(recorded)}"
    return None


def _span(rounds: list[Any]) -> str:
    return "none" if not rounds else f"{rounds[0]:g}..{rounds[-1]:g} ({len(rounds)} records)"
