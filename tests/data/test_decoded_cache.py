"""The on-disk cache of decoded datasets: bit-identical to decoding, never stale, safe to fill concurrently."""

from __future__ import annotations

import gzip
import hashlib
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fedbench.core.cache import cache_dir
from fedbench.core.registry import DATASETS
from fedbench.data import mnist_family
from fedbench.data.base import BaseDataset
from tests.data.test_cifar import write_cifar10, write_cifar100
from tests.data.test_femnist import LEAF_FILES, write_leaf
from tests.data.test_mnist_family import MNIST_NAMES, _idx_bytes, write_idx_set

EMNIST_NAMES = [
    f"emnist-digits-{s}-{k}-idx{d}-ubyte" for s in ("train", "test") for k, d in (("images", 3), ("labels", 1))
]


def load(name: str, root: Path, **options) -> BaseDataset:
    """The loader itself, past load_dataset's per-process memo, so every call goes through the disk cache."""
    return DATASETS.get(name)(root, **options)


def uncached(name: str, root: Path, tmp_path: Path, monkeypatch, **options) -> BaseDataset:
    """A plain decode: the cache folder cannot be created (it would lie under a regular file)."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    with monkeypatch.context() as patch:
        patch.setenv("FEDBENCH_CACHE", str(blocker / "cache"))
        with pytest.warns(UserWarning, match="cannot cache the decoded dataset") as caught:
            dataset = load(name, root, **options)
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    return dataset


def assert_identical(a: BaseDataset, b: BaseDataset) -> None:
    """Same arrays bit for bit (dtype, shape, values), same meta, classes and scenario cache identity."""
    for left, right in ((a.x, b.x), (a.y, b.y)):
        assert left.dtype == right.dtype and left.shape == right.shape and np.array_equal(left, right)
    assert a.meta.equals(b.meta) and a.meta.dtypes.equals(b.meta.dtypes) and a.meta.index.equals(b.meta.index)
    assert (a.name, a.num_classes, a.classes) == (b.name, b.num_classes, b.classes)
    assert a.identity == b.identity and a.train_channel_stats == b.train_channel_stats


def assert_memory_mapped(dataset: BaseDataset) -> None:
    """Read-only views of a file mapping, as plain ndarrays that pickle out of band (ray.put copies no bytes in
    band)."""
    for array in (dataset.x, dataset.y):
        assert type(array) is np.ndarray and isinstance(array.base, np.memmap) and not array.flags.writeable
    buffers: list = []
    blob = pickle.dumps(dataset, protocol=5, buffer_callback=buffers.append)
    assert len(blob) < dataset.x.nbytes and sum(memoryview(b).nbytes for b in buffers) >= dataset.x.nbytes


def entries() -> list[Path]:
    return sorted(p for p in (cache_dir() / "decoded").iterdir() if p.name != "digests")


def write_sources(name: str, root: Path) -> dict:
    if name in ("mnist", "fmnist"):
        return write_idx_set(root / {"mnist": "MNIST", "fmnist": "FashionMNIST"}[name] / "raw", MNIST_NAMES, gz=True)
    if name == "emnist":
        return write_idx_set(root / "EMNIST" / "raw", EMNIST_NAMES, gz=True)
    if name == "cifar10":
        return write_cifar10(root)
    if name == "cifar100":
        return write_cifar100(root)
    return write_leaf(root / "femnist", LEAF_FILES)


@pytest.mark.parametrize(
    "name, options",
    [
        ("mnist", {}),
        ("mnist", {"colourise": True, "colour_seed": 3}),
        ("fmnist", {}),
        ("emnist", {}),
        ("cifar10", {}),
        ("cifar100", {"label": "coarse"}),
        ("femnist", {}),
        ("femnist", {"digits_only": True}),
    ],
)
def test_cached_loads_are_identical_to_a_plain_decode(tmp_path, monkeypatch, name, options):
    write_sources(name, tmp_path)
    decoded = uncached(name, tmp_path, tmp_path, monkeypatch, **options)
    first, second = load(name, tmp_path, **options), load(name, tmp_path, **options)
    assert_identical(first, decoded)
    assert_identical(second, decoded)
    assert_memory_mapped(first)
    assert_memory_mapped(second)
    assert len(entries()) == 1


@pytest.mark.real_data
@pytest.mark.parametrize("name, options", [("mnist", {}), ("fmnist", {}), ("mnist", {"colourise": True})])
def test_real_files_cached_are_identical_to_a_plain_decode(tmp_path, monkeypatch, name, options):
    root = os.environ.get("FEDBENCH_DATA")
    folder = {"mnist": "MNIST", "fmnist": "FashionMNIST"}[name]
    if not root or not all((Path(root) / folder / "raw" / f"{n}.gz").is_file() for n in MNIST_NAMES):
        pytest.skip(f"set FEDBENCH_DATA to a folder holding {folder}/raw/*.gz")
    decoded = uncached(name, Path(root), tmp_path, monkeypatch, **options)
    load(name, Path(root), **options)
    monkeypatch.setattr(mnist_family, "read_idx_gz", lambda *args: pytest.fail("a cached dataset was decoded again"))
    cached = load(name, Path(root), **options)
    assert_identical(cached, decoded)
    assert_memory_mapped(cached)


def test_a_second_load_neither_decodes_nor_rehashes_the_files(tmp_path, monkeypatch):
    write_sources("mnist", tmp_path)
    first = load("mnist", tmp_path)
    monkeypatch.setattr(mnist_family, "read_idx_gz", lambda *args: pytest.fail("a cached dataset was decoded again"))
    monkeypatch.setattr(hashlib, "file_digest", lambda *args: pytest.fail("an unchanged file was hashed again"))
    assert_identical(load("mnist", tmp_path), first)


def test_a_rewritten_file_is_never_served_stale_even_with_its_old_size_and_mtime(tmp_path):
    arrays = write_sources("mnist", tmp_path)
    images = tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte.gz"
    assert np.array_equal(load("mnist", tmp_path).x[:5, 0], arrays["train_x"])
    before = images.stat()
    changed = arrays["train_x"].copy()
    changed[0, 0, 0] ^= 0xFF
    blob = gzip.compress(_idx_bytes(changed), mtime=0)
    images.write_bytes(blob + b"\0" * (before.st_size - len(blob)) if len(blob) < before.st_size else blob)
    os.utime(images, ns=(before.st_atime_ns, before.st_mtime_ns))  # as `cp -p` or a restored backup would leave it
    assert np.array_equal(load("mnist", tmp_path).x[:5, 0], changed)
    assert len(entries()) == 2


def test_a_touched_but_unchanged_file_finds_the_same_entry(tmp_path):
    write_sources("mnist", tmp_path)
    first = load("mnist", tmp_path)
    os.utime(tmp_path / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz")
    assert_identical(load("mnist", tmp_path), first)
    assert len(entries()) == 1


def test_options_key_their_own_entries(tmp_path):
    write_sources("mnist", tmp_path)
    write_sources("cifar100", tmp_path)
    gray, coloured = load("mnist", tmp_path), load("mnist", tmp_path, colourise=True)
    fine, coarse = load("cifar100", tmp_path), load("cifar100", tmp_path, label="coarse")
    assert gray.x.shape[1] == 1 and coloured.x.shape[1] == 3
    assert fine.num_classes == 100 and coarse.num_classes == 20
    assert np.array_equal(coarse.y, fine.meta["coarse_label"].to_numpy())
    assert len(entries()) == 4


@pytest.mark.parametrize("damage", ["no manifest", "truncated images", "missing labels"])
def test_an_incomplete_or_damaged_entry_is_decoded_and_written_again(tmp_path, damage):
    write_sources("mnist", tmp_path)
    first = load("mnist", tmp_path)
    (entry,) = entries()
    if damage == "no manifest":
        (entry / "manifest.json").unlink()
    elif damage == "truncated images":  # a new file, as a crash before the data reached the disk leaves it
        truncated = (entry / "x.npy").read_bytes()[:-100]  # (rewriting x.npy in place would change `first` too)
        (entry / "x.npy").unlink()
        (entry / "x.npy").write_bytes(truncated)
    else:
        (entry / "y.npy").unlink()
    assert_identical(load("mnist", tmp_path), first)
    assert_identical(load("mnist", tmp_path), first)  # repaired: read from the cache again
    assert_memory_mapped(load("mnist", tmp_path))


_FILL = """
import sys, time, hashlib
from pathlib import Path
from fedbench.data.mnist_family import mnist
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.01)
ds = mnist(Path(sys.argv[1]))
print(hashlib.sha256(ds.x.tobytes() + ds.y.tobytes()).hexdigest())
"""


@pytest.mark.slow
def test_processes_filling_the_cache_at_once_all_read_whole_identical_files(tmp_path, monkeypatch):
    write_idx_set(tmp_path / "MNIST" / "raw", MNIST_NAMES, gz=True, n_train=6000, n_test=1000)
    go = tmp_path / "go"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]),
    }
    fillers = [
        subprocess.Popen(
            [sys.executable, "-c", _FILL, str(tmp_path), str(go)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    time.sleep(1)  # let them import and wait, so that they decode and write at the same time
    go.touch()
    results = [p.communicate(timeout=300) for p in fillers]
    assert all(p.returncode == 0 for p in fillers), [err for _, err in results]
    monkeypatch.setattr(mnist_family, "read_idx_gz", lambda *args: pytest.fail("a cached dataset was decoded again"))
    cached = load("mnist", tmp_path)
    expected = hashlib.sha256(cached.x.tobytes() + cached.y.tobytes()).hexdigest()
    assert [out.strip() for out, _ in results] == [expected] * 3
    (entry,) = entries()
    assert not [p.name for p in entry.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.ray
def test_workers_read_a_cached_dataset_from_the_object_store_without_copying_it(tmp_path, ray_session):
    ray = ray_session
    write_sources("mnist", tmp_path)
    dataset = load("mnist", tmp_path)

    @ray.remote(num_cpus=1)
    def seen(shipped):
        arrays = (shipped.x, shipped.y)
        return [(a.flags.owndata, a.flags.writeable) for a in arrays], [a.tobytes() for a in arrays]

    flags, content = ray.get(seen.remote(ray.put(dataset)))
    assert flags == [(False, False), (False, False)]  # views of the object store's shared memory
    assert content == [dataset.x.tobytes(), dataset.y.tobytes()]


def mapped_kb(path: Path) -> int:
    """Resident kB of this process's mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's header: address range ... pathname
            inside = fields[-1] == str(path)
        elif inside and fields[0] == "Rss:":
            total += int(fields[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads Linux's /proc/self/smaps")
def test_released_pages_leave_the_process_and_come_back_on_access(tmp_path):
    write_idx_set(tmp_path / "MNIST" / "raw", MNIST_NAMES, gz=True, n_train=2000, n_test=500)
    dataset = load("mnist", tmp_path)
    (entry,) = entries()
    expected = dataset.x.tobytes()  # touches every page
    assert mapped_kb(entry / "x.npy") * 1024 >= dataset.x.nbytes * 0.9
    dataset.release_pages()
    assert mapped_kb(entry / "x.npy") <= 8
    assert dataset.x.tobytes() == expected
