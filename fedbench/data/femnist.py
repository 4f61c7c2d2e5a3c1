"""FEMNIST from LEAF's JSON files: handwritten digits and letters grouped by the writer who drew them.

The writer is what makes FEMNIST federated (one client per writer or per group of writers, seed 003's
EMNIST-digits writer split), so it becomes the meta column 'writer'. LEAF only ships scripts that build the
JSON from NIST's raw images, so nothing is downloaded here: the files must already be under the root. Parsing
the JSON is slow, so the decoded arrays are cached on disk and memory-mapped by later runs
(`fedbench.data.decoded_cache`).
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np

from fedbench.core.data_files import DataFiles
from fedbench.core.errors import DataCorruptError, DataMissingError
from fedbench.core.registry import register_dataset
from fedbench.data.base import BaseDataset, DatasetFacts, with_facts, with_files
from fedbench.data.decoded_cache import cached_dataset

# LEAF's relabel_class: 0-9 digits, 10-35 uppercase, 36-61 lowercase letters.
CLASSES = tuple(string.digits + string.ascii_uppercase + string.ascii_lowercase)
# Share of each writer's samples marked 'test' when only LEAF's unsplit all_data/ exists (its default --tf 0.9).
ALL_DATA_TEST_FRACTION = 0.1
_LAYOUTS = ("femnist", "femnist/data")  # <root>/femnist/..., or LEAF's own leaf/data/femnist/data/... as root
LEAF_FILES = DataFiles(
    tuple(
        layout
        for folder in _LAYOUTS
        for layout in ((f"{folder}/train/*.json", f"{folder}/test/*.json"), (f"{folder}/all_data/*.json",))
    )
)
"""What `_find` reads, as `with_files` declares it."""
Record = tuple[str, np.ndarray, np.ndarray]  # (LEAF user name, uint8 images [n, 1, 28, 28], int64 labels [n])


@register_dataset("femnist")
@with_files(LEAF_FILES)
@with_facts(lambda digits_only: DatasetFacts(10 if digits_only else 62, 1, (28, 28), ("writer",)))
def femnist(root: Path, digits_only: bool = False) -> BaseDataset:
    """LEAF FEMNIST as uint8 [N, 1, 28, 28], 62 classes (0-9, A-Z, a-z), meta 'split' and 'writer'.

    Reads `train/*.json` and `test/*.json` (LEAF's split: by writer with `-t user`, within each writer with
    `-t sample`); where only `all_data/*.json` exists, the last 10% of each writer's samples become 'test'.
    LEAF stores NIST's scans as they are, dark ink on a white background, as floats in [0, 1] with 1.0 for
    the background. Pixels become round((1 - value) * 255): bright ink on a black background as in MNIST,
    so that models and transforms built for MNIST see the same kind of image. meta['writer'] numbers the
    LEAF user names in sorted order over the writers kept, so the same files give the same ids everywhere.

    Args:
        root: the data root; files are looked for in `<root>/femnist/` and `<root>/femnist/data/` (so LEAF's
            own `leaf/data` folder works as a root).
        digits_only: keep only the 10 digit classes (labels 0-9), e.g. for seed 003's EMNIST-digits writer
            split; writers without digits disappear.

    Raises:
        DataMissingError: no LEAF JSON files under the root (the message says where they are looked for
            and how to build them).
        DataCorruptError: a file is not JSON, or a writer's labels or pixels do not fit (naming file and writer).
    """
    files = _find(root)
    return cached_dataset(
        "femnist",
        [p for paths in files.values() for p in paths],
        lambda: _decode(files, digits_only),
        digits_only=digits_only,
    )


def _decode(files: dict[str, list[Path]], digits_only: bool) -> BaseDataset:
    """The dataset from LEAF's JSON files of each split (`_find`)."""
    records = {split: [r for path in paths for r in _read(path, digits_only)] for split, paths in files.items()}
    if "all" in records:
        records = _split_per_writer(records.pop("all"))
    writers = sorted({user for split in records.values() for user, _, _ in split})
    writer_id = {user: i for i, user in enumerate(writers)}

    def stack(split: list[Record]) -> dict[str, np.ndarray]:
        if not split:
            return {
                "x": np.zeros((0, 1, 28, 28), np.uint8),
                "y": np.zeros(0, np.int64),
                "writer": np.zeros(0, np.int64),
            }
        return {
            "x": np.concatenate([x for _, x, _ in split]),
            "y": np.concatenate([y for _, _, y in split]),
            "writer": np.concatenate([np.full(len(y), writer_id[user], np.int64) for user, _, y in split]),
        }

    classes = CLASSES[:10] if digits_only else CLASSES
    return BaseDataset.from_splits("femnist", classes, stack(records["train"]), stack(records["test"]))


def _find(root: Path) -> dict[str, list[Path]]:
    """The JSON files of each split ('train' and 'test', else 'all'), in sorted order."""
    for layout in _LAYOUTS:
        folder = root / layout
        train, test = sorted(folder.glob("train/*.json")), sorted(folder.glob("test/*.json"))
        if train and test:
            return {"train": train, "test": test}
        everything = sorted(folder.glob("all_data/*.json"))
        if everything:
            return {"all": everything}
    looked = ", ".join(str(root / layout / "{train,test,all_data}/*.json") for layout in _LAYOUTS)
    raise DataMissingError(
        f"femnist: no LEAF JSON files found; looked for {looked}. FEMNIST cannot be downloaded directly: build it "
        "with LEAF (https://github.com/TalwalkarLab/leaf): `cd leaf/data/femnist && ./preprocess.sh -s niid --sf 0.05 "
        "-k 0 -t user` (or `-t sample` to split each writer's samples), then set FEDBENCH_DATA (or the task's "
        "dataset.data_root) to leaf/data, or copy its femnist/data/{train,test} to <root>/femnist/."
    )


def _read(path: Path, digits_only: bool) -> list[Record]:
    """The writers of one LEAF file, images turned to MNIST's polarity, letters dropped if `digits_only`."""
    try:
        with open(path) as f:
            blob = json.load(f)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError: cut short or not JSON
        raise DataCorruptError(f"{path}: not a readable LEAF JSON file ({type(exc).__name__}: {exc})") from exc
    records = []
    for user in blob["users"]:
        data = blob["user_data"][user]
        y = np.asarray(data["y"], dtype=np.int64)
        if y.size and not (0 <= y.min() and y.max() < len(CLASSES)):
            raise DataCorruptError(f"{path}: user {user} has labels outside 0..{len(CLASSES) - 1}")
        pixels = np.asarray(data["x"], dtype=np.float64)
        if pixels.size != len(y) * 28 * 28:
            raise DataCorruptError(
                f"{path}: user {user} has {len(y)} labels but {pixels.size} pixels, not 28x28 per label"
            )
        keep = y < 10 if digits_only else slice(None)
        pixels = pixels.reshape(len(y), 1, 28, 28)[keep]
        if len(pixels):
            records.append((user, np.round((1.0 - np.clip(pixels, 0.0, 1.0)) * 255).astype(np.uint8), y[keep]))
    return records


def _split_per_writer(records: list[Record]) -> dict[str, list[Record]]:
    """Train and test records from unsplit ones: the last ALL_DATA_TEST_FRACTION of each writer is 'test'."""
    out: dict[str, list[Record]] = {"train": [], "test": []}
    for user, x, y in records:
        cut = len(y) - int(np.ceil(ALL_DATA_TEST_FRACTION * len(y))) if len(y) > 1 else 1
        out["train"].append((user, x[:cut], y[:cut]))
        if cut < len(y):
            out["test"].append((user, x[cut:], y[cut:]))
    return out
