"""How well can a sample's client be told from its pixels alone (no labels), gray vs colourised MNIST?

For feddrm/dir0.3's 8 photometric clients: take up to 600 training images per client after the client's
transform, describe each by colour statistics of its stroke (per-channel mean, std and 90th percentile of
the pixels brighter than 0.05 in value, in HSV and RGB), and fit a multinomial logistic regression; report
held-out accuracy of predicting the client (chance 1/8). An upper-bound-style probe of what the covariate
shift alone gives a router, independent of FedDRM's training. Prints one line; used in bench/results/feddrm_colour.md:

    FEDBENCH_DATA=... nice -n 10 python bench/feddrm_client_probe.py colour   # or: gray
"""

import sys

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from fedbench.config.task import resolve_run
from fedbench.data import load_dataset
from fedbench.scenarios.generator import build_scenario
from fedbench.scenarios.transforms import BatchTransform


def features(x):  # x float [B, 3, H, W] in [0, 1]
    v = x.max(1).values
    mn = x.min(1).values
    sat = (v - mn) / v.clamp_min(1e-6)
    out = []
    for img, val, s in zip(x, v, sat, strict=True):
        m = val > 0.05
        px = img[:, m]  # [3, P]
        r, g, b = px
        mx, mi = px.max(0).values, px.min(0).values
        c = (mx - mi).clamp_min(1e-6)
        hue = torch.where(mx == r, ((g - b) / c) % 6, torch.where(mx == g, (b - r) / c + 2, (r - g) / c + 4)) / 6
        feats = [
            px.mean(1),
            px.std(1),
            px.quantile(0.9, dim=1),
            torch.stack(
                [
                    val[m].mean(),
                    val[m].std(),
                    s[m].mean(),
                    s[m].std(),
                    torch.cos(2 * np.pi * hue).mean(),
                    torch.sin(2 * np.pi * hue).mean(),
                ]
            ),
        ]
        out.append(torch.cat(feats).numpy())
    return np.array(out)


for colour in [sys.argv[1] == "colour"]:
    spec = resolve_run(
        {
            "task": "probe",
            "dataset": {"name": "mnist", "colourise": colour},
            "model": {"name": "feddrm_net", "backbone": "cnn"},
            "scenario": {"preset": "feddrm/dir0.3"},
            "seed": 2025,
        }
    )
    data = load_dataset(spec.dataset.name, **spec.dataset.kwargs)
    scen = build_scenario(data, spec.scenario, 2025, 1)
    X, Y = [], []
    rng = np.random.default_rng(0)
    for cid, view in enumerate(scen.stages[0]):
        rows = rng.choice(view.train, size=min(600, len(view.train)), replace=False)
        t = BatchTransform(view.transform, 3)
        x = t(torch.from_numpy(np.asarray(data.x[rows])), torch.from_numpy(data.y[rows]))
        X.append(features(x))
        Y += [cid] * len(rows)
    X, Y = np.concatenate(X), np.array(Y)
    a, b, ya, yb = train_test_split(X, Y, test_size=0.3, random_state=0, stratify=Y)
    sc = StandardScaler().fit(a)
    clf = LogisticRegression(max_iter=3000).fit(sc.transform(a), ya)
    print(
        f"colourise={colour}: client from pixel statistics, held-out accuracy {clf.score(sc.transform(b), yb):.3f} "
        f"(n={len(yb)}, chance 0.125)",
        flush=True,
    )
