"""Checkpoints that cannot lie (issue 47, items 1-3): one that claims more than it holds or is cut short is refused,
named, and the one before is used; reading one never imports a module its JSON names."""

from __future__ import annotations

import dataclasses
import io
import json
import sys

import numpy as np
import pytest

from fedbench.core.state_codec import TREE, StateCodecError, dumps, loads
from fedbench.runtime import Federation
from fedbench.runtime.checkpoint import CheckpointFolder
from tests.runtime.test_checkpoint import ROUNDS, KillAfter, Killed, numbers, spec_for


def killed_after_five(tmp_path):
    """FedAvg of ROUNDS rounds killed after round 5, checkpoints every 2: round-0002 and round-0004 on disk."""
    folder, spec = tmp_path / "checkpoints", spec_for("fedavg")
    with pytest.raises(Killed):
        Federation(spec, [KillAfter(5)], backend="serial", checkpoints=CheckpointFolder(folder, every=2)).run()
    return spec, folder


def resume(spec, folder):
    federation = Federation(spec, backend="serial", checkpoints=CheckpointFolder(folder, every=2))
    return federation, federation.run()


def test_a_checkpoint_claiming_more_rounds_than_it_holds_is_refused_and_the_one_before_used(tmp_path):
    spec, folder = killed_after_five(tmp_path)
    newest = folder / "round-0004.npz"
    newest.write_bytes(dumps(dataclasses.replace(loads(newest.read_bytes()), round=1000)))
    with pytest.warns(UserWarning, match=r"round-0004\.npz refused: it claims round 1000.*1\.\.5"):
        federation, result = resume(spec, folder)
    assert federation.resumed_from == 2 and result.status == "FINISHED", result.reason
    assert len(result.history) == ROUNDS
    assert numbers(result.history) == numbers(Federation(spec, backend="serial").run().history)


def test_a_checkpoint_whose_history_does_not_match_its_round_is_refused(tmp_path):
    spec, folder = killed_after_five(tmp_path)
    newest = folder / "round-0004.npz"
    checkpoint = loads(newest.read_bytes())
    newest.write_bytes(dumps(dataclasses.replace(checkpoint, history=checkpoint.history[:2])))
    with pytest.warns(UserWarning, match=r"round-0004\.npz refused: it claims round 4 but holds .* rounds 1..2"):
        federation, _ = resume(spec, folder)
    assert federation.resumed_from == 2


def test_a_truncated_newest_checkpoint_falls_back_to_the_intact_one_and_names_the_file(tmp_path):
    spec, folder = killed_after_five(tmp_path)
    newest = folder / "round-0004.npz"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # a disk that filled mid-write
    with pytest.warns(UserWarning, match=r"round-0004\.npz cannot be read \(BadZipFile"):
        federation, result = resume(spec, folder)
    assert federation.resumed_from == 2 and result.status == "FINISHED", result.reason
    assert numbers(result.history) == numbers(Federation(spec, backend="serial").run().history)


def test_reading_a_checkpoint_imports_no_module_its_json_names(tmp_path):
    """`this` prints the Zen of Python when imported: a class `this:X` in a checkpoint must not import it."""
    with np.load(io.BytesIO(dumps(dataclasses.replace(_small(), round=3))), allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    tree = json.loads(arrays[TREE].tobytes().decode())
    tree["class"] = "this:X"
    arrays[TREE] = np.frombuffer(json.dumps(tree).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    sys.modules.pop("this", None)
    with pytest.raises(StateCodecError, match=r"class this:X: .*'this' is neither"):
        loads(buffer.getvalue())
    assert "this" not in sys.modules
    tree["class"] = "fedbench.cli:main"  # fedbench's own module, but not a dataclass
    arrays[TREE] = np.frombuffer(json.dumps(tree).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    with pytest.raises(StateCodecError, match="not a dataclass"):
        loads(buffer.getvalue())


def _small():
    from fedbench.runtime.checkpoint import RunCheckpoint

    return RunCheckpoint("abc", 1, None, {}, [{"round": 1.0}])
