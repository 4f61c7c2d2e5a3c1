"""An experiment's finished runs carried from one MLflow store to another as a single path-free file: a sweep run on a
GPU machine or a cluster, brought home to a laptop's store; or a long sweep's finished runs kept between machines and
resumed there with `fedbench sweep --resume`.

A bundle (`fedbench bundle`) is a tar.xz of three parts, in this order:

- `manifest.json`: `{"format": "fedbench-run-bundle", "version": 1, "experiment": NAME, "runs": N}`;
- `runs.jsonl`: one run a line, `{"experiment", "run_id" (in the store it came from), "run_name", "status",
  "start_time", "end_time", "tags", "params", "metrics": {key: [[step, value, timestamp], ...]}}`;
- `artifacts/<run_id>/...`: each run's artifacts (`per_client.parquet`, `runspec.yaml`, a sweep's plots).

It holds every FINISHED run of the experiment and each sweep parent run with a FINISHED child: what a resumed sweep
or a report reads. Nothing in it names a path of the machine it came from: no artifact URI, no tag naming the
process or checkout that wrote a run (`DROPPED_TAGS`), no owner in the archive's headers.

`fedbench unbundle` adds a bundle's runs to the current store, each with its status, times, tags, params and whole
metric histories, parents before children (whose parent tag is rewritten to the parent's new id). It adds nothing
twice: a run whose source id the store already holds (as a run id or `fedbench.bundled_from`), or a FINISHED run of
a run hash the store already holds FINISHED, is left out; a sweep the store already has keeps its latest parent run,
and the bundle's children join it, so that `fedbench sweep --resume` there counts their trials as done.
"""

from __future__ import annotations

import json
import lzma
import os
import re
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedbench.core.errors import ConfigError
from fedbench.tracking.mlflow_callback import experiment_id_for
from fedbench.tracking.paths import store_missing
from fedbench.tracking.patient_store import PatientClient
from fedbench.tracking.store import RUN_HASH
from fedbench.tracking.store_template import prepare_store
from fedbench.tracking.tags import BUNDLED_FROM_TAG, LEASE_TAG, PARENT_RUN_TAG, STOPPED_EARLY_TAG, SWEEP_TAG

FORMAT, VERSION = "fedbench-run-bundle", 1
"""What `manifest.json` says a bundle is, and the layout's version (a later fedbench reads older versions)."""
MANIFEST, RUNS, ARTIFACTS = "manifest.json", "runs.jsonl", "artifacts"
SUFFIX = ".tar.xz"
FIELDS = ("experiment", "run_id", "run_name", "status", "start_time", "end_time", "tags", "params", "metrics")
"""What each line of `runs.jsonl` holds."""
DROPPED_TAGS = frozenset({LEASE_TAG, "mlflow.source.name", "mlflow.source.git.repoURL"})
"""Tags that name the machine, process or checkout a run was written from (the sweep's lease: host and pid; the
script's path and the repository's location where MLflow's fluent API set them): they mean nothing in another store.
fedbench's own runs carry no other `mlflow.*` tags than `mlflow.runName`, `mlflow.parentRunId` and a sweep parent's
`mlflow.note.content`, which are kept."""
PATH_PARAMS = frozenset({"dataset.data_root"})
"""Params that say where a run's files were on the machine that ran it (not part of what the run computes): bundled
blank, in the params and in the run's `runspec.yaml`."""
RUN_NAME_TAG = "mlflow.runName"
FINISHED, RUNNING = "FINISHED", "RUNNING"
MAX_PARAMS, MAX_METRICS = 100, 1000
"""The most params, and metrics, MLflow takes in one `log_batch` call."""
PAGE = 10000
RUN_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")
"""A source run id as a folder name under `artifacts/`: nothing a bundle says can lead outside it."""
BUNDLE_FIELD = "bundle"
WHAT = f"a bundle written by `fedbench bundle` (a {SUFFIX} holding {MANIFEST}, {RUNS} and {ARTIFACTS}/)"


@dataclass(frozen=True)
class Bundled:
    """What `write_bundle` wrote: how many runs of which experiment, into which file."""

    path: Path
    experiment: str
    runs: int
    unreadable: str | None = None
    """The experiment's artifact location where it is a folder of this machine that does not exist, so that the runs
    went without their artifacts (a store copied from another machine keeps the paths of the machine that wrote it)."""


@dataclass(frozen=True)
class Unbundled:
    """What `add_bundle` did: the runs it added to the experiment in the store at `uri`, and those already there."""

    experiment: str
    uri: str
    added: int
    already: int


def write_bundle(experiment: str, uri: str, out: str | os.PathLike) -> Bundled:
    """Write experiment `experiment`'s finished runs in the store at `uri` (and their sweeps' parents) to `out`.

    Raises:
        ConfigError: `out` is no `.tar.xz` name, the store or experiment does not exist, or it has no finished run.
    """
    path = Path(out)
    if not path.name.endswith(SUFFIX) or path.name == SUFFIX:
        raise ConfigError("--out", str(out), f"a file name ending in {SUFFIX}")
    client = source_client(uri, experiment)
    found = client.get_experiment_by_name(experiment)
    runs = bundled_runs(all_runs(client, found.experiment_id))
    if not runs:
        raise ConfigError("--experiment", experiment, f"an experiment with finished runs to bundle (in {uri})")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        lines = [json.dumps(run_record(client, experiment, run)) for run in runs]
        (root / RUNS).write_text("".join(line + "\n" for line in lines))
        manifest = {"format": FORMAT, "version": VERSION, "experiment": experiment, "runs": len(runs)}
        (root / MANIFEST).write_text(json.dumps(manifest))
        for run in runs:
            download_artifacts(client, run.info.run_id, root / ARTIFACTS)
        pack(root, path)
    return Bundled(path, experiment, len(runs), missing_folder(found.artifact_location))


def missing_folder(location: str | None) -> str | None:
    """`location` where it is a folder of this machine that does not exist, else None: MLflow lists no artifact there
    rather than failing, so a store carried over from another machine would be bundled without them, unsaid."""
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    parsed = urlparse(location or "")
    if parsed.scheme not in ("", "file") or not parsed.path or Path(url2pathname(parsed.path)).exists():
        return None
    return location


def source_client(uri: str, experiment: str) -> PatientClient:
    """A client of the store at `uri` holding experiment `experiment`; a missing store is not created."""
    where = f"the tracking store {uri}"
    if store_missing(uri):
        raise ConfigError("--experiment", experiment, f"an experiment in {where}; that store does not exist")
    client = PatientClient(uri)
    if client.get_experiment_by_name(experiment) is None:
        raise ConfigError("--experiment", experiment, f"an experiment in {where}")
    return client


def all_runs(client: PatientClient, experiment_id: str) -> list[Any]:
    """Every run of the experiment (deleted ones aside), oldest first, page by page."""
    runs: list[Any] = []
    token = None
    while True:
        page = client.search_runs([experiment_id], max_results=PAGE, order_by=["start_time ASC"], page_token=token)
        runs += page
        token = page.token
        if not token:
            return runs


def bundled_runs(runs: Sequence[Any]) -> list[Any]:
    """The runs a resumed sweep or a report reads: the FINISHED ones, and each sweep parent with a FINISHED child."""
    with_finished_child = {run.data.tags.get(PARENT_RUN_TAG) for run in runs if run.info.status == FINISHED}
    return [
        run
        for run in runs
        if run.info.status == FINISHED or (SWEEP_TAG in run.data.tags and run.info.run_id in with_finished_child)
    ]


def run_record(client: PatientClient, experiment: str, run: Any) -> dict[str, Any]:
    """Run `run` as a line of `runs.jsonl`: all of it but its artifact URI and the tags `DROPPED_TAGS` names."""
    run_id = run.info.run_id
    return {
        "experiment": experiment,
        "run_id": run_id,
        "run_name": run.info.run_name,
        "status": run.info.status,
        "start_time": run.info.start_time,
        "end_time": run.info.end_time,
        "tags": {k: v for k, v in sorted(run.data.tags.items()) if k not in DROPPED_TAGS},
        "params": {k: "None" if k in PATH_PARAMS else v for k, v in sorted(run.data.params.items())},
        "metrics": {
            key: [[m.step, m.value, m.timestamp] for m in client.get_metric_history(run_id, key)]
            for key in sorted(run.data.metrics)
        },
    }


def download_artifacts(client: PatientClient, run_id: str, into: Path) -> None:
    """Run `run_id`'s artifacts into `into/<run_id>/` (nothing for a run without any)."""
    if not client.list_artifacts(run_id):
        return
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar per run would flood the console
    target = into / run_id
    target.mkdir(parents=True)
    client.download_artifacts(run_id, "", str(target))
    blank_data_root(target / "runspec.yaml")


def blank_data_root(path: Path) -> None:
    """The run's RunSpec file without the data folder of the machine that ran it (`PATH_PARAMS`)."""
    import yaml

    if not path.is_file():
        return
    spec = yaml.safe_load(path.read_text())
    if isinstance(spec, dict) and isinstance(spec.get("dataset"), dict) and spec["dataset"].get("data_root"):
        spec["dataset"]["data_root"] = None
        path.write_text(yaml.safe_dump(spec, sort_keys=False))


def pack(root: Path, out: Path) -> None:
    """`root`'s manifest, runs and artifacts as the tar.xz `out`, written beside it first and then moved into place,
    so that an interrupted bundle never passes for a whole one."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
    try:
        with tarfile.open(partial, "w:xz") as tar:
            for name in (MANIFEST, RUNS, ARTIFACTS):
                if (root / name).exists():
                    tar.add(root / name, arcname=name, filter=anonymous)
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)


def anonymous(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """A member without the user and group that owned the file on the source machine."""
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    return member


def read_bundle(path: Path, into: Path) -> list[dict[str, Any]]:
    """The runs of bundle `path`, its artifacts unpacked under `into/artifacts/`.

    Raises:
        ConfigError: `path` does not exist or is not a bundle this fedbench reads.
    """
    if not path.is_file():
        raise ConfigError(BUNDLE_FIELD, str(path), f"{WHAT}; no such file")
    try:
        with tarfile.open(path, "r:xz") as tar:
            check_manifest(tar, path)
            tar.extractall(into, filter="data")  # refuses absolute paths, `..` and links out of `into`
    except (tarfile.TarError, lzma.LZMAError, EOFError) as exc:
        raise ConfigError(BUNDLE_FIELD, str(path), f"{WHAT}; this file is not one ({exc})") from None
    if not (into / RUNS).is_file():
        raise ConfigError(BUNDLE_FIELD, str(path), f"{WHAT}; this one has no {RUNS}")
    return parse_runs((into / RUNS).read_text(), path)


def check_manifest(tar: tarfile.TarFile, path: Path) -> None:
    """Refuse an archive whose first member is not a bundle's manifest, or one of a later version."""
    member = tar.next()
    handle = tar.extractfile(member) if member is not None and member.name == MANIFEST else None
    try:
        manifest = json.loads(handle.read()) if handle is not None else None
    except ValueError:
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ConfigError(BUNDLE_FIELD, str(path), f"{WHAT}; this archive has no bundle manifest")
    if not isinstance(manifest.get("version"), int) or manifest["version"] > VERSION:
        raise ConfigError(
            BUNDLE_FIELD, str(path), f"a bundle of version {VERSION} or older (this is {manifest.get('version')!r})"
        )


def parse_runs(text: str, path: Path) -> list[dict[str, Any]]:
    """The lines of `runs.jsonl`, each checked to be a whole run of one and the same experiment."""
    runs = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            run = json.loads(line)
        except ValueError:
            run = None
        if not isinstance(run, dict) or any(k not in run for k in FIELDS) or not RUN_ID.fullmatch(str(run["run_id"])):
            raise ConfigError(BUNDLE_FIELD, str(path), f"{WHAT}; line {number} of its {RUNS} is not a run")
        runs.append(run)
    if len({run["experiment"] for run in runs}) != 1:
        raise ConfigError(BUNDLE_FIELD, str(path), f"{WHAT}; its {RUNS} holds the runs of exactly one experiment")
    return runs


@dataclass
class Destination:
    """What the destination experiment already holds, read once before anything is added."""

    known: set[str] = field(default_factory=set)
    """Its run ids and the source ids of the runs bundled into it."""
    finished_hashes: set[str] = field(default_factory=set)
    """The run hashes of its FINISHED runs."""
    latest_parent: dict[str, str] = field(default_factory=dict)
    """Sweep name -> the id of its latest parent run (the one `--resume` reopens)."""

    @classmethod
    def of(cls, runs: Sequence[Any]) -> Destination:
        """What `runs` (oldest first) hold."""
        there = cls()
        for run in runs:
            tags = run.data.tags
            there.known.update(filter(None, (run.info.run_id, tags.get(BUNDLED_FROM_TAG))))
            if run.info.status == FINISHED and RUN_HASH in run.data.params and STOPPED_EARLY_TAG not in tags:
                there.finished_hashes.add(run.data.params[RUN_HASH])  # as the leaderboard and --skip-finished count
            if SWEEP_TAG in tags:
                there.latest_parent[tags[SWEEP_TAG]] = run.info.run_id
        return there

    def took(self, run: dict[str, Any]) -> None:
        """Count bundled run `run` as here now: a second run of its hash later in the same bundle is not added."""
        self.known.add(run["run_id"])
        if run["status"] == FINISHED and STOPPED_EARLY_TAG not in run["tags"] and RUN_HASH in run["params"]:
            self.finished_hashes.add(run["params"][RUN_HASH])

    def holds(self, run: dict[str, Any]) -> bool:
        """Whether bundled run `run` is here already: its source id is, or it is FINISHED and so is its run hash."""
        if {run["run_id"], run["tags"].get(BUNDLED_FROM_TAG)} & self.known:
            return True
        return run["status"] == FINISHED and run["params"].get(RUN_HASH) in self.finished_hashes


def add_bundle(path: str | os.PathLike, uri: str) -> Unbundled:
    """Add bundle `path`'s runs to the store at `uri` (created if needed), each run once.

    Raises:
        ConfigError: `path` does not exist or is not a bundle (checked before the store is touched).
    """
    with tempfile.TemporaryDirectory() as folder:
        runs = read_bundle(Path(path), Path(folder))
        experiment = runs[0]["experiment"]
        prepare_store(uri)
        client = PatientClient(uri)
        experiment_id = experiment_id_for(client, experiment)
        there = Destination.of(all_runs(client, experiment_id))
        parents: dict[str, str] = {}
        added = 0
        for run in parents_first(runs):
            sweep = run["tags"].get(SWEEP_TAG)
            if sweep in there.latest_parent:  # the sweep is here: its children join its latest parent
                parents[run["run_id"]] = there.latest_parent[sweep]
            elif not there.holds(run):
                new_id = add_run(client, experiment_id, run, parents, Path(folder) / ARTIFACTS)
                parents[run["run_id"]] = new_id
                there.took(run)
                added += 1
    return Unbundled(experiment, uri, added, len(runs) - added)


def parents_first(runs: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Sweep parents before the other runs, each kind oldest first: a child's parent has its new id by then."""
    yield from sorted(runs, key=lambda run: (SWEEP_TAG not in run["tags"], run["start_time"] or 0))


def add_run(
    client: PatientClient, experiment_id: str, run: dict[str, Any], parents: dict[str, str], artifacts: Path
) -> str:
    """Create bundled run `run` in the experiment as it was (its parent tag pointing at `parents`' new id for it,
    marked with its source id); its new id. A run cut short by an error is deleted, so a second try adds it whole."""
    tags = {k: v for k, v in run["tags"].items() if k != RUN_NAME_TAG}
    if tags.get(PARENT_RUN_TAG) in parents:
        tags[PARENT_RUN_TAG] = parents[tags[PARENT_RUN_TAG]]
    tags[BUNDLED_FROM_TAG] = run["run_id"]
    new_id = client.create_run(
        experiment_id, start_time=run["start_time"], tags=tags, run_name=run["run_name"]
    ).info.run_id
    try:
        log_values(client, new_id, run)
        if (artifacts / run["run_id"]).is_dir():
            client.log_artifacts(new_id, str(artifacts / run["run_id"]))
        if run["status"] != RUNNING:
            client.set_terminated(new_id, run["status"], run["end_time"])
    except BaseException:
        client.delete_run(new_id)
        raise
    return new_id


def log_values(client: PatientClient, run_id: str, run: dict[str, Any]) -> None:
    """Bundled run `run`'s params and every point of its metrics' histories, in batches MLflow takes."""
    from mlflow.entities import Metric, Param

    params = [Param(k, str(v)) for k, v in run["params"].items()]
    metrics = [
        Metric(key, float(value), int(timestamp), int(step))
        for key, points in run["metrics"].items()
        for step, value, timestamp in points
    ]
    for start in range(0, len(params), MAX_PARAMS):
        client.log_batch(run_id, params=params[start : start + MAX_PARAMS])
    for start in range(0, len(metrics), MAX_METRICS):
        client.log_batch(run_id, metrics=metrics[start : start + MAX_METRICS])
