"""System accuracy (004 Sec. 5): the federation answers a pooled test set, one answer per sample.

Every training client's personal model (its `system_payloads` entry) travels to every client as one
bundle; each client answers its own test split with all of them, so no test sample leaves its client.
With a router (FedDRM's client head) the sample goes to the client it scores highest and that client's
model answers; without one, the personal models vote (ties to the smallest class id, docs/methods.md).
Clients sharing one payload object (FedAvg's global model) share one entry of the bundle, and an array
that several models share (FedDRM's backbone next to each client's own target layer) travels once: the
other models carry a one-number reference to the model that holds it. Where one model answers for every
client and it is the model each client was just evaluated with, the vote is that model's answer: the pooled
accuracy comes from the last evaluation's counts, with no second pass (`evaluation.answered_by_evaluation`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fedbench.core import metrics as M
from fedbench.core.types import ClientResult, Payload

OWNERS = "owners"
"""Bundle section `{"index": int64 [clients]}`: for client j, the index of the model it owns."""
REFERENCE = "@"
"""Suffix of a bundle array's name whose value names the earlier model carrying that array."""
ENSEMBLE = "ensemble"
"""Bundle section `{"weight": float64 [clients]}` of a test-time ensemble: the weight of each owner's model."""


def bundle(payloads: Mapping[int, Payload]) -> Payload:
    """One payload with every distinct payload as `models[k]` and `owners`; an array already shipped at the same
    place (section and name, inside the same indexed model) by model k0 becomes `<name>@` = [k0] in later ones."""
    models: dict[int, int] = {}  # id(payload) -> k
    shipped: dict[tuple, int] = {}  # (place, id(array)) -> the model that carries it
    distinct: dict[int, Payload] = {}
    owners = np.zeros(len(payloads), dtype=np.int64)
    for j in sorted(payloads):
        payload = payloads[j]
        if id(payload) not in models:
            k = models[id(payload)] = len(models)
            distinct[k] = _referencing(payload, k, (), shipped)
        owners[j] = models[id(payload)]
    return Payload(extras={OWNERS: {"index": owners}}, models=distinct)


def _referencing(payload: Payload, k: int, place: tuple, shipped: dict[tuple, int]) -> Payload:
    """`payload` as model k of a bundle: each array an earlier model shipped at the same place is a reference."""
    sections: dict[str, dict[str, np.ndarray]] = {}
    for section, arrays in payload.sections.items():
        out = sections[section] = {}
        for name, value in arrays.items():
            first = shipped.setdefault((place, section, name, id(value)), k)
            out[name if first == k else name + REFERENCE] = value if first == k else np.array([first], dtype=np.int64)
    nested = {i: _referencing(part, k, (*place, i), shipped) for i, part in payload.models.items()}
    return Payload(extras=sections, models=nested)


def unbundle(flat: Payload) -> tuple[list[Payload], np.ndarray]:
    """The distinct payloads of a bundle, by index (a referenced array is the same object in both), and the
    index of the payload each client owns."""
    models = [flat.models[k] for k in range(len(flat.models))]
    resolved: list[Payload] = []
    for model in models:
        resolved.append(_resolved(model, (), resolved))
    return resolved, flat[OWNERS]["index"]


def _resolved(model: Payload, place: tuple, earlier: list[Payload]) -> Payload:
    """`model` with each reference replaced by the array the earlier model it names carries at the same place."""
    sections: dict[str, dict[str, np.ndarray]] = {}
    for section, arrays in model.sections.items():
        out = sections[section] = {}
        for name, value in arrays.items():
            if name.endswith(REFERENCE):
                name = name[: -len(REFERENCE)]
                value = _at(earlier[int(value[0])], place)[section][name]
            out[name] = value
    nested = {i: _resolved(part, (*place, i), earlier) for i, part in model.models.items()}
    return Payload(extras=sections, models=nested)


def _at(payload: Payload, place: tuple) -> Payload:
    for i in place:
        payload = payload.models[i]
    return payload


def ensemble_bundle(models: Mapping[int, Payload], weights: Mapping[int, float]) -> Payload:
    """An `Ensemble`'s models as one bundle (shared arrays travel once) with each model's weight."""
    order = sorted(models)
    flat = bundle({i: models[k] for i, k in enumerate(order)})
    return flat.replace({ENSEMBLE: {"weight": np.array([weights[k] for k in order], dtype=np.float64)}})


def ensemble_metrics(probabilities: Sequence[np.ndarray], flat: Payload, labels: np.ndarray) -> dict[str, float]:
    """Accuracy and cross-entropy of the weighted mean of the distinct models' probabilities (`probabilities[k]`
    for model k of `unbundle(flat)`) on one test client's split."""
    owners, weight = flat[OWNERS]["index"], flat[ENSEMBLE]["weight"]
    per_model = np.bincount(owners, weights=weight, minlength=len(probabilities))
    mixture = sum(w * p for w, p in zip(per_model / per_model.sum(), probabilities, strict=True))
    n = len(labels)
    if not n:
        return {M.ACCURACY: float("nan"), M.LOSS: float("nan"), M.TEST_SAMPLES: 0.0}
    picked = mixture[np.arange(n), labels]
    return {
        M.ACCURACY: float((mixture.argmax(axis=1) == labels).mean()),
        M.LOSS: float(-np.log(np.maximum(picked, 1e-12)).mean()),
        M.TEST_SAMPLES: float(n),
    }


def system_counts(
    outputs: Sequence[dict[str, np.ndarray]], owners: np.ndarray, labels: np.ndarray, client_id: int, num_classes: int
) -> dict[str, float]:
    """Correct system answers (and, with a router, samples routed home) on one client's test split.

    Args:
        outputs: `client_predict` of each distinct model on this client's test split.
        owners: model index of every training client.
        labels: the split's labels.
    """
    preds = np.stack([out[M.PRED] for out in outputs], axis=1)  # [n, models]
    counts = {M.SYSTEM_SAMPLES: float(len(labels))}
    if M.ROUTE in outputs[0]:
        routed = np.asarray(outputs[0][M.ROUTE]).argmax(axis=1)  # the router is shared by all clients' models
        answer = preds[np.arange(len(labels)), owners[routed]]
        counts[M.ROUTED_HOME] = float((routed == client_id).sum())
    else:
        votes = np.zeros((len(labels), num_classes), dtype=np.int64)
        for owner in owners:
            votes[np.arange(len(labels)), preds[:, owner]] += 1
        answer = votes.argmax(axis=1)  # argmax takes the first maximum: ties go to the smallest class id
    counts[M.SYSTEM_CORRECT] = float((answer == labels).sum())
    return counts


def system_metrics(results: Sequence[ClientResult]) -> dict[str, float]:
    """Pooled accuracy over all clients' test splits, and routing accuracy where a router answered."""
    total = sum(r.metrics[M.SYSTEM_SAMPLES] for r in results)
    if not total:
        return {}
    record = {M.ACC_SYSTEM: sum(r.metrics[M.SYSTEM_CORRECT] for r in results) / total}
    if all(M.ROUTED_HOME in r.metrics for r in results):
        record[M.ACC_ROUTING] = sum(r.metrics[M.ROUTED_HOME] for r in results) / total
    return record


def pooled_accuracy(evals: Sequence[ClientResult]) -> dict[str, float]:
    """`system_metrics` from the evaluation results of one shared model: each client's correct answers are its
    accuracy times its test samples (exact: an integer count divided and multiplied back by the same size)."""
    total = sum(r.metrics[M.TEST_SAMPLES] for r in evals)
    if not total:
        return {}
    correct = sum(
        float(round(r.metrics[M.ACCURACY] * r.metrics[M.TEST_SAMPLES])) for r in evals if r.metrics[M.TEST_SAMPLES]
    )
    return {M.ACC_SYSTEM: correct / total}
