"""System accuracy (004 Sec. 5): the federation answers a pooled test set, one answer per sample.

Every training client's personal model (its `evaluation_payloads` entry) travels to every client as one
bundle; each client answers its own test split with all of them, so no test sample leaves its client.
With a router (FedDRM's client head) the sample goes to the client it scores highest and that client's
model answers; without one, the personal models vote (ties to the smallest class id, METHODS.md).
Clients sharing one payload object (FedAvg's global model) share one entry of the bundle, and an array
that several models share (FedDRM's backbone next to each client's own target layer) travels once: the
other models carry a one-number reference to the model that holds it.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from fedbench.core import metrics as M
from fedbench.core.types import ClientResult, Payload

OWNERS = "owners"
"""Bundle key: for client j, the index of the model it owns."""
REFERENCE = "@"
"""Suffix of a bundle key whose value names the earlier model carrying that array."""


def bundle(payloads: Mapping[int, Payload]) -> Payload:
    """One flat payload with every distinct model as `m<k>/<key>` and `owners[j]` = k for client j; an array
    already shipped under the same key by model k0 becomes `m<k>/<key>@` = [k0]."""
    models: dict[int, int] = {}  # id(payload) -> k
    shipped: dict[tuple[str, int], int] = {}  # (key, id(array)) -> the model that carries it
    flat: Payload = {}
    owners = np.zeros(len(payloads), dtype=np.int64)
    for j in sorted(payloads):
        payload = payloads[j]
        if id(payload) not in models:
            k = models[id(payload)] = len(models)
            for key, value in payload.items():
                first = shipped.setdefault((key, id(value)), k)
                if first == k:
                    flat[f"m{k}/{key}"] = value
                else:
                    flat[f"m{k}/{key}{REFERENCE}"] = np.array([first], dtype=np.int64)
        owners[j] = models[id(payload)]
    flat[OWNERS] = owners
    return flat


def unbundle(flat: Payload) -> list[Payload]:
    """The distinct models of a bundle, by index (a referenced array is the same object in both models)."""
    count = int(flat[OWNERS].max()) + 1 if len(flat[OWNERS]) else 0
    models: list[Payload] = [{} for _ in range(count)]
    references = []
    for name, value in flat.items():
        if name != OWNERS:
            k, key = name.split("/", 1)
            if key.endswith(REFERENCE):
                references.append((int(k[1:]), key[: -len(REFERENCE)], int(value[0])))
            else:
                models[int(k[1:])][key] = value
    for k, key, first in references:
        models[k][key] = models[first][key]
    return models


def system_counts(outputs: Sequence[dict[str, np.ndarray]], owners: np.ndarray, labels: np.ndarray, client_id: int,
                  num_classes: int) -> dict[str, float]:
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
