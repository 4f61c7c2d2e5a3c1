"""Payload: named sections, bytes over every section, immutable, compared by identity, picklable zero-copy."""

import dataclasses
import pickle

import numpy as np
import pytest

from fedbench.core.types import WEIGHTS, Payload


def example() -> Payload:
    return Payload(
        {"w": np.zeros((2, 3), dtype=np.float32), "b": np.zeros(3, dtype=np.float32)},
        {"samples": {"n": np.array([7], dtype=np.int64)}, "profile": {"full": np.ones(5)}},
    )


def test_sections_are_the_weights_and_the_named_extras():
    payload = example()
    assert set(payload.sections) == {WEIGHTS, "samples", "profile"}
    assert payload.weights is payload[WEIGHTS] and set(payload.weights) == {"w", "b"}
    assert "profile" in payload and "cluster" not in payload
    assert Payload().weights == {} and not Payload().sections
    assert WEIGHTS not in Payload(extras={"cluster": {"id": np.zeros(1)}})


def test_bytes_count_every_array_of_every_section():
    assert example().nbytes == 4 * 6 + 4 * 3 + 8 + 8 * 5
    assert sum(a.nbytes for a in example().arrays()) == example().nbytes
    assert Payload().nbytes == 0
    assert "84 bytes" in repr(example())  # a payload prints its size, never its arrays


def test_relayed_payloads_are_kept_by_sender_apart_from_the_payloads_own_sections():
    sent = example()
    relayed = Payload(peers={12: sent, 3: Payload({"w": np.ones(2)})}).replace({"own": {"x": np.zeros(1)}})
    assert list(relayed.sections) == ["own"]  # the relay's own section is not a peer's
    peers = relayed.peers
    assert sorted(peers) == [3, 12] and set(peers[12].sections) == set(sent.sections)
    assert all(peers[12][name] is sent[name] for name in sent.sections)


def test_replace_builds_a_new_payload_sharing_the_other_sections():
    payload = example()
    profile = {"full": np.zeros(5)}
    changed = payload.replace({"profile": profile, "bounds": {"box": np.zeros(2)}})
    assert changed is not payload and changed["profile"] is profile and "bounds" in changed
    assert changed.weights is payload.weights and changed["samples"] is payload["samples"]
    assert np.all(payload["profile"]["full"] == 1.0) and "bounds" not in payload  # the original is unchanged
    assert changed.replace({WEIGHTS: {"w": np.ones(1)}}).weights["w"][0] == 1.0


def test_a_payload_is_immutable_and_compared_by_identity():
    payload = example()
    with pytest.raises(dataclasses.FrozenInstanceError):
        payload.sections = {}
    twin = Payload(payload.weights, {k: v for k, v in payload.sections.items() if k != WEIGHTS})
    assert twin != payload and payload == payload  # the same content is not the same payload: it ships again
    assert len({id(p): p for p in (payload, payload, twin)}) == 2


def test_it_pickles_and_its_arrays_leave_as_out_of_band_buffers():
    """Ray serialises with pickle protocol 5: numpy arrays inside any object travel as buffers, not copies."""
    payload = example()
    buffers = []
    data = pickle.dumps(payload, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == len(list(payload.arrays()))
    back = pickle.loads(data, buffers=buffers)
    assert isinstance(back, Payload) and back.sections.keys() == payload.sections.keys()
    for name, arrays in payload.sections.items():
        assert all(np.array_equal(back[name][k], v) and back[name][k].dtype == v.dtype for k, v in arrays.items())
