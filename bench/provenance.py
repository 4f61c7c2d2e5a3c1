"""Where a committed result came from, and whether today's code still draws the same runs.

A result in bench/results/ names the commit and command that made it. Its provenance file
(bench/results/provenance/<result's path, '/' as '-'>.json) adds, for every run behind it, the RunSpec, its run hash,
the key of its scenario, the scenario's fingerprint (who holds which samples in every stage) and the behaviour
fingerprint of its method (`behaviour`: the metrics of a few rounds of the same configuration on a tiny drifting
stand-in, as bench/metrics_hash.py hashes a run). `check` recomputes them from the recorded RunSpec with today's
code: a changed run hash means the configuration reads differently now, a changed key or fingerprint that the same
configuration draws other data, a changed behaviour that the code computes other numbers for it (a fix to a method,
its training or its evaluation that leaves the RunSpec alone), so the result no longer describes what the command
computes and must be re-run. tests/test_committed_results.py runs it over every provenance file.

A behaviour is compared by its numbers where the record keeps them (`behaviour_numbers`), within `BEHAVIOUR_RTOL`:
the same code computes float32 numbers that differ in their last bits from one CPU to another (AVX-512 against
AVX2: training losses 1e-8 apart, accuracies equal), which the digest alone (kept, and compared where a record
has no numbers) cannot tell from a change of the code.

A result that is known to be stale and is being re-run says so: its provenance file carries `"stale": "<why, and
what re-runs it>"` and the result's first line a banner (`STALE_BANNER`); the test then checks that it really is
stale and is marked, instead of failing.

A bench script records its runs with `record(result, command, specs)` as it writes the result; a committed
`fedbench report` of a task's profile is recorded from the command line, after the report is written:

    FEDBENCH_DATA=... python bench/provenance.py tasks/feroma_drift.yaml --profile reduced
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import subprocess
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedbench.config import load_task
from fedbench.config.task import resolve_run
from fedbench.core.runspec import RunSpec
from fedbench.data import load_dataset
from fedbench.scenarios import build_scenario
from fedbench.scenarios.generator import num_stages, scenario_key

RESULTS = Path(__file__).resolve().parent / "results"
PAPER = "paper"
"""A task's whole grid (`fedbench.config.task.PAPER_PROFILE`, spelled out: `add_behaviours` runs this file against
older checkouts too)."""
PROVENANCE = RESULTS / "provenance"


STALE_BANNER = "> **Stale:**"
"""How a result known to be stale begins (the rest of the line says why and what re-runs it)."""
PROBE_ROUNDS = 2
PROBE_CLIENTS = 10
"""A larger federation is probed at 10 clients where its scenario allows: the code is fingerprinted, not the scale."""
PROBE_SAMPLES = 150
"""Training samples per client of the stand-in."""
BEHAVIOUR_KEYS = ("acc_", "train_loss")
BEHAVIOUR_RTOL = 1e-3
"""How far (relative; 1e-6 absolute near zero) a probe's number may be from the recorded one and still be the same
code's. The same code on other CPU kernels (AVX2 against AVX-512, or scalar ones) moved probes' training losses by
1e-8 in their first round and by up to 2.4e-5 in the second where training amplifies it (FedAvgFT fine-tuning on
scalar kernels); a change of a method moves accuracies by a test sample (1/300) or more and losses by far more."""
"""The round metrics a behaviour fingerprint digests (prefixes): the accuracies and losses results compare, not the
timings, nor the byte counts (a change to how evaluation traffic is metered leaves the accuracies a result is
about; a result's cost columns are re-measured whenever it is re-run)."""
PROBE_PHASES = {"warmup_rounds": 1, "ft_rounds": 1, "density_rounds": 1}
"""Method parameters that count rounds of a first phase, cut so that the probe's rounds get past it."""


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One run behind a result, as the code that made the result saw it."""

    spec: dict
    run_hash: str
    scenario_key: str
    fingerprint: str
    behaviour: str = ""
    """`behaviour(spec)`'s digest; empty in a record written before it existed."""
    behaviour_metrics: tuple[str, ...] = ()
    """The round metrics that digest covers, so that a metric added later (which the result does not report) leaves
    it; empty in a record written before they were listed: then every metric BEHAVIOUR_KEYS names."""
    behaviour_numbers: list = dataclasses.field(default_factory=list)
    """What the digest is of: [status, reason, each round's digested metrics], compared within BEHAVIOUR_RTOL; empty
    in a record written before they were kept (then the digest is compared)."""


def fingerprint(scenario) -> str:
    """A digest of who holds what in `scenario`: every stage's client indices and distribution ids, the
    round-to-stage table and the test-time clients. Two scenarios with one fingerprint give runs the same data.
    Read from the artifact's fields only, so that it also fingerprints a scenario built by an older checkout."""
    digest = hashlib.sha1()
    views = [view for stage in scenario.stages for view in stage] + [c.view for c in scenario.test_clients]
    for view in views:
        for part in (view.train, view.test, np.array([view.distribution_id])):
            digest.update(np.ascontiguousarray(part, dtype=np.int64).tobytes())
    digest.update(np.asarray(scenario.round_stage, dtype=np.int64).tobytes())
    digest.update(np.asarray([c.origin for c in scenario.test_clients], dtype=np.int64).tobytes())
    return digest.hexdigest()[:16]


def probe_of(spec: RunSpec) -> dict:
    """The stand-in `behaviour` runs for `spec`: the same method, model, optimizer, normalisation, test-time and
    scoring protocol and scenario section, on class-prototype images of the dataset's shape (PROBE_SAMPLES a
    client), for PROBE_ROUNDS rounds of one local step, drifting every round where the spec drifts, seed 0,
    serial; a method's first phase cut to one round (PROBE_PHASES)."""
    plain = spec.to_dict()
    data = load_dataset(spec.dataset.name, spec.dataset.data_root, **spec.dataset.kwargs)
    if data.x.ndim == 4:  # images: [n, channels, height, width]
        _, channels, height, width = data.x.shape
        assert height == width, "synthetic_images draws square images"
        plain["dataset"] = {
            "name": "synthetic_images",
            "channels": int(channels),
            "size": int(height),
            "num_classes": data.num_classes,
            "train_samples": PROBE_SAMPLES * spec.scenario.num_clients,
            "test_samples": 300,
        }
    plain["algorithm"] = {k: PROBE_PHASES.get(k, v) if v is not None else v for k, v in plain["algorithm"].items()}
    if plain["scenario"].get("drift_every") is not None:
        plain["scenario"]["drift_every"] = 1
    plain.update(rounds=PROBE_ROUNDS, local_steps=1, seed=0, eval_every=1)
    plain.pop("run_name", None)  # older checkouts refuse a null name
    plain["resources"] = {"backend": "serial"}
    return plain


def probe_variants(plain: dict) -> list[dict]:
    """The stand-in at PROBE_CLIENTS clients where the spec has more, else as it is; each with one local step, then
    with one epoch (a method that trains whole epochs, such as a centralised pool)."""
    clients = plain["scenario"]["num_clients"]
    sizes = [min(clients, PROBE_CLIENTS), clients] if clients > PROBE_CLIENTS else [clients]
    variants = []
    for n in sizes:
        dataset = plain["dataset"]
        if dataset.get("name") == "synthetic_images":
            dataset = {**dataset, "train_samples": PROBE_SAMPLES * n}
        sized = {**plain, "dataset": dataset, "scenario": {**plain["scenario"], "num_clients": n}}
        variants += [sized, {**sized, "local_steps": None, "local_epochs": 1}]
    return variants


def first_that_reads(variants: list[dict]) -> RunSpec | str:
    """The first variant today's (or the imported) code accepts as a run; else why the last was refused."""
    reason = ""
    for variant in variants:
        try:
            return resolve_run(variant)
        except Exception as exc:  # a preset that needs more clients, a method that refuses steps: the next
            reason = str(exc)
    return reason


Behaviour = tuple[str, tuple[str, ...], list]
"""A probe's digest, the metrics it covers and its numbers (`behaviour`)."""


def behaviour(spec: RunSpec, metrics: Sequence[str] = ()) -> Behaviour:
    """What today's code computes for `spec`'s configuration: a digest of the status and the numbers of each
    round of `probe_of(spec)`, and the round metrics it covers: `metrics` where given (those a record lists),
    else every accuracy and training loss the probe records (BEHAVIOUR_KEYS). A change to the method, the training
    loop, the evaluation or the scoring changes it, a metric added later does not; one configuration (its seeds
    pooled) has one. `unprobeable: <why>` where the stand-in cannot run it. Returned with the numbers digested."""
    from fedbench.runtime import run_spec

    probe = first_that_reads(probe_variants(probe_of(spec)))
    if isinstance(probe, str):  # a configuration tied to its real data (a size the stand-in lacks): said, not hidden
        return f"unprobeable: {probe}"[:200], (), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the stand-in's short schedule makes methods warn (degenerate warm-ups)
        result = run_spec(probe)
    digested = tuple(metrics) or tuple(sorted({k for r in result.history for k in r if k.startswith(BEHAVIOUR_KEYS)}))
    history = [{k: v for k, v in sorted(record.items()) if k in digested} for record in result.history]
    numbers = json.loads(json.dumps([result.status, result.reason, history], sort_keys=True))
    return hashlib.sha256(json.dumps(numbers, sort_keys=True).encode()).hexdigest()[:16], digested, numbers


def same_numbers(then: object, now: object) -> bool:
    """Whether two behaviours' numbers are the same code's: the same structure and texts, floats within
    BEHAVIOUR_RTOL."""
    if isinstance(then, float) or isinstance(now, float):
        return (
            isinstance(then, int | float)
            and isinstance(now, int | float)
            and bool(np.isclose(now, then, rtol=BEHAVIOUR_RTOL, atol=1e-6, equal_nan=True))
        )
    if isinstance(then, list) and isinstance(now, list):
        return len(then) == len(now) and all(same_numbers(a, b) for a, b in zip(then, now, strict=True))
    if isinstance(then, dict) and isinstance(now, dict):
        return then.keys() == now.keys() and all(same_numbers(then[k], now[k]) for k in then)
    return then == now


def describe(spec: RunSpec, behaviours: dict[str, Behaviour] | None = None, metrics: Sequence[str] = ()) -> RunRecord:
    """`spec`'s record: its RunSpec (without the machine's data path), run hash, scenario key, fingerprint and
    behaviour over `metrics` (all it records where none are given; taken from `behaviours`, keyed by the probe's own
    settings and those metrics, where a run of the same configuration computed it already: seeds share one probe)."""
    dataset = load_dataset(spec.dataset.name, spec.dataset.data_root, **spec.dataset.kwargs)
    scenario = build_scenario(dataset, spec.scenario, spec.seed, spec.rounds)
    plain = spec.to_dict()
    plain["dataset"] = {k: v for k, v in plain["dataset"].items() if k != "data_root"}
    stages = num_stages(spec.scenario, spec.rounds)
    behaviours = {} if behaviours is None else behaviours
    key = probe_key(spec, metrics)
    if key not in behaviours:
        behaviours[key] = behaviour(spec, metrics)
    digest, digested, numbers = behaviours[key]
    return RunRecord(
        plain,
        spec.run_hash,
        scenario_key(dataset, spec.scenario, spec.seed, stages),
        fingerprint(scenario),
        digest,
        digested,
        numbers,
    )


def probe_key(spec: RunSpec, metrics: Sequence[str] = ()) -> str:
    """What a behaviour is cached by: the probe's settings and the metrics it digests."""
    return json.dumps([probe_of(spec), list(metrics)], sort_keys=True, default=str)


def head_commit() -> str:
    """The checkout's commit, `+` appended where it has uncommitted changes (a result made from those names the
    commit it was made on top of, and says so)."""

    def run(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=RESULTS, check=True).stdout

    return run("rev-parse", "--short", "HEAD").strip() + (
        "+" if run("status", "--porcelain", "--untracked-files=no").strip() else ""
    )


def record(
    result: str, command: str, specs: Sequence[RunSpec], commit: str | None = None, folder: Path = PROVENANCE
) -> Path:
    """Write the provenance of bench/results/`result` (made by `command` at `commit`, default HEAD) from `specs`
    into `folder`."""
    commit = commit or head_commit()
    behaviours: dict[str, Behaviour] = {}
    runs = [dataclasses.asdict(describe(spec, behaviours)) for spec in dict((s.run_hash, s) for s in specs).values()]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{Path(result).with_suffix('').as_posix().replace('/', '-')}.json"
    path.write_text(json.dumps({"result": result, "commit": commit, "command": command, "runs": runs}, indent=1) + "\n")
    return path


def method_of(spec: dict) -> str:
    """What a behaviour probe of `spec` is mostly about: its method, model and scoring (a plain RunSpec mapping)."""
    return json.dumps([spec.get(k) for k in ("algorithm", "model", "scored_round")], sort_keys=True, default=str)


def check(path: Path, every_probe: bool = True) -> list[str]:
    """What no longer matches in the provenance file `path` (empty: the result still describes today's code). Every
    run's hashes and scenario are checked; its behaviour too, or with `every_probe` off only the first run's of each
    method configuration (`method_of`): the test suite's sample, which a change to a method still fails, at a
    fraction of the probes (a report's 32 probes are 8 methods on 4 scenarios)."""
    saved = json.loads(path.read_text())
    problems = []
    behaviours: dict[str, Behaviour] = {}
    probed: set[str] = set()
    for run in saved["runs"]:
        name = run["spec"].get("run_name") or run["run_hash"]
        try:
            spec = resolve_run(run["spec"])
        except Exception as exc:  # the recorded configuration no longer reads: that is staleness too
            problems.append(f"{name}: today's code cannot read its RunSpec ({exc})")
            continue
        method, metrics = method_of(run["spec"]), run.get("behaviour_metrics", [])
        numbers = run.get("behaviour_numbers")
        if not every_probe and method in probed:  # not probed: taken as recorded
            recorded = (run.get("behaviour", ""), tuple(metrics), numbers or [])
            now = describe(spec, {probe_key(spec, metrics): recorded}, metrics)
        else:
            now = describe(spec, behaviours, metrics)
        probed.add(method)
        for field, label in (("run_hash", "run hash"), ("scenario_key", "scenario key"), ("fingerprint", "scenario")):
            if getattr(now, field) != run[field]:
                problems.append(f"{name}: {label} {run[field]} then, {getattr(now, field)} now")
        if not run.get("behaviour"):
            problems.append(f"{name}: no behaviour fingerprint recorded (re-record it at the result's commit)")
        elif numbers and not same_numbers(numbers, now.behaviour_numbers):
            moved = f"behaviour numbers moved beyond {BEHAVIOUR_RTOL:g}"
            problems.append(f"{name}: {moved} (the code computes other numbers)")
        elif not numbers and now.behaviour != run["behaviour"]:
            problems.append(
                f"{name}: behaviour {run['behaviour']} then, {now.behaviour} now (the code computes other numbers)"
            )
    return problems


def stale_mark(path: Path) -> str | None:
    """Why the result of provenance file `path` is marked stale (being re-run), None where it is not."""
    return json.loads(path.read_text()).get("stale")


def record_report(task_file: str, profile: str = PAPER) -> Path:
    """Record the runs behind bench/results/reports/<experiment>/report.md, the report of `task_file`'s `profile`."""
    task = load_task(task_file, [f"profile={profile}"])
    folder = f"reports/{task.name}"
    command = (
        f"fedbench sweep {task_file} --profile {profile}; "
        f"fedbench report {task_file} --profile {profile} --out bench/results/{folder}"
    )
    return record(f"{folder}/report.md", command, task.expand())


def add_behaviours(path: Path) -> None:
    """Fill in the behaviour fingerprints of a provenance file recorded before they existed, with the code that is
    imported: run it from a checkout of the result's commit (PYTHONPATH) so that they describe that code."""
    saved = json.loads(path.read_text())
    behaviours: dict[str, Behaviour] = {}
    for run in saved["runs"]:
        now = describe(resolve_run(run["spec"]), behaviours)
        run["behaviour"], run["behaviour_metrics"] = now.behaviour, list(now.behaviour_metrics)
        run["behaviour_numbers"] = now.behaviour_numbers
    path.write_text(json.dumps(saved, indent=1) + "\n")


def add_numbers(path: Path) -> list[str]:
    """Keep, beside each record's digest, the numbers today's code computes for it (its listed metrics), so that
    the check compares numbers within BEHAVIOUR_RTOL rather than digests of the last bits (which differ by CPU).
    Meant for code that computes what the result's code did (its digests reproduced where they were made); returns
    the runs whose digest this machine reproduces too, the rest differing in last bits only where that holds."""
    saved = json.loads(path.read_text())
    behaviours: dict[str, Behaviour] = {}
    matched = []
    for run in saved["runs"]:
        now = describe(resolve_run(run["spec"]), behaviours, run.get("behaviour_metrics", []))
        run["behaviour_numbers"] = now.behaviour_numbers
        if now.behaviour == run.get("behaviour"):
            matched.append(run["run_hash"])
    path.write_text(json.dumps(saved, indent=1) + "\n")
    return matched


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Record the runs behind a committed `fedbench report`.")
    parser.add_argument("task", nargs="?", help="the task file, e.g. tasks/feroma_drift.yaml")
    parser.add_argument("--profile", default=PAPER, help="the profile the report is of, e.g. reduced")
    parser.add_argument(
        "--check",
        metavar="FILE",
        help="check a provenance file against today's code, every run's behaviour probed (the suite samples them)",
    )
    parser.add_argument(
        "--add-behaviours",
        metavar="FILE",
        help="fill in a provenance file's behaviour fingerprints (see add_behaviours)",
    )
    parser.add_argument(
        "--add-numbers",
        metavar="FILE",
        help="keep the numbers of a provenance file's behaviours, computed by today's code (see add_numbers)",
    )
    cli = parser.parse_args()
    if cli.check:
        found = check(Path(cli.check))
        print("\n".join(found) or f"{cli.check}: matches today's code")
        raise SystemExit(1 if found else 0)
    if cli.add_numbers:
        same = add_numbers(Path(cli.add_numbers))
        print(f"{cli.add_numbers}: numbers kept; {len(same)} run(s) reproduce their digest on this machine too")
    elif cli.add_behaviours:
        add_behaviours(Path(cli.add_behaviours))
    else:
        print(record_report(cli.task, cli.profile))
