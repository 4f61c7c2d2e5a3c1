"""The GPU numbers the README and docs/cluster.md quote are bench/results/gpu.json's, and the warning's too."""

import json
import re
from pathlib import Path

from fedbench.runtime.gpu_sharing import shared_gpu_message

ROOT = Path(__file__).resolve().parents[1]
MEASURED = json.loads((ROOT / "bench" / "results" / "gpu.json").read_text())


def steady(workers: int, mps: bool) -> str:
    [run] = [r for r in MEASURED["runs"] if r["workers"] == workers and r["mps"] == mps]
    return f"{run['steady_round_s']:.2f}"


def test_the_readme_and_cluster_docs_quote_the_committed_gpu_benchmark():
    hand = f"{MEASURED['handwritten']['steady_round_s']:.2f}"
    for doc in ("README.md", "docs/cluster.md"):
        text = (ROOT / doc).read_text()
        assert re.search(rf"hand-written loop, one process, all data on the GPU \| {hand} \|", text), doc
        for workers, share in ((1, "1"), (8, "0.125"), (16, "0.0625")):
            row = rf"\| {workers} workers? x {share} GPU \| {steady(workers, False)} \| {steady(workers, True)} \|"
            assert re.search(row, text), (doc, row)
    sweep = {s["reuse"]: f"{s['wall_s']:.1f}" for s in MEASURED["sweeps"]}
    assert f"{sweep[True]} s\nwith fedbench's default worker reuse" in (ROOT / "docs/cluster.md").read_text()


def test_the_warning_quotes_the_measured_cost():
    message = shared_gpu_message({("local", "0"): {"1", "2"}})
    assert f"took {steady(8, False)} s a round this way and {steady(8, True)} s under MPS" in message
