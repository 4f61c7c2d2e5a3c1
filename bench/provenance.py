"""Where a committed result came from, and whether today's code still draws the same runs.

A result in bench/results/ names the commit and command that made it. Its provenance file
(bench/results/provenance/<result's path, '/' as '-'>.json) adds, for every run behind it, the RunSpec, its run hash,
the key of its
scenario and the scenario's fingerprint (who holds which samples in every stage). `check` recomputes those from
the recorded RunSpec with today's code, without training: a changed run hash means the configuration reads
differently now, a changed key or fingerprint that the same configuration draws other data, so the result
no longer describes what the command computes and must be re-run. tests/test_committed_results.py runs it over
every provenance file.

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
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedbench.config import load_task
from fedbench.config.task import PAPER_PROFILE, resolve_run
from fedbench.core.runspec import RunSpec
from fedbench.data import load_dataset
from fedbench.scenarios import build_scenario
from fedbench.scenarios.generator import num_stages, scenario_key

RESULTS = Path(__file__).resolve().parent / "results"
PROVENANCE = RESULTS / "provenance"


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One run behind a result, as the code that made the result saw it."""

    spec: dict
    run_hash: str
    scenario_key: str
    fingerprint: str


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


def describe(spec: RunSpec) -> RunRecord:
    """`spec`'s record: its RunSpec (without the machine's data path), run hash, scenario key and fingerprint."""
    dataset = load_dataset(spec.dataset.name, spec.dataset.data_root, **spec.dataset.kwargs)
    scenario = build_scenario(dataset, spec.scenario, spec.seed, spec.rounds)
    plain = spec.to_dict()
    plain["dataset"] = {k: v for k, v in plain["dataset"].items() if k != "data_root"}
    stages = num_stages(spec.scenario, spec.rounds)
    return RunRecord(
        plain, spec.run_hash, scenario_key(dataset, spec.scenario, spec.seed, stages), fingerprint(scenario)
    )


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
    runs = [dataclasses.asdict(describe(spec)) for spec in dict((s.run_hash, s) for s in specs).values()]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{Path(result).with_suffix('').as_posix().replace('/', '-')}.json"
    path.write_text(json.dumps({"result": result, "commit": commit, "command": command, "runs": runs}, indent=1) + "\n")
    return path


def check(path: Path) -> list[str]:
    """What no longer matches in the provenance file `path` (empty: the result still describes today's code)."""
    saved = json.loads(path.read_text())
    problems = []
    for run in saved["runs"]:
        name = run["spec"].get("run_name") or run["run_hash"]
        try:
            spec = resolve_run(run["spec"])
        except Exception as exc:  # the recorded configuration no longer reads: that is staleness too
            problems.append(f"{name}: today's code cannot read its RunSpec ({exc})")
            continue
        now = describe(spec)
        for field, label in (("run_hash", "run hash"), ("scenario_key", "scenario key"), ("fingerprint", "scenario")):
            if getattr(now, field) != run[field]:
                problems.append(f"{name}: {label} {run[field]} then, {getattr(now, field)} now")
    return problems


def record_report(task_file: str, profile: str = PAPER_PROFILE) -> Path:
    """Record the runs behind bench/results/reports/<experiment>/report.md, the report of `task_file`'s `profile`."""
    task = load_task(task_file, [f"profile={profile}"])
    folder = f"reports/{task.name}"
    command = (
        f"fedbench sweep {task_file} --profile {profile}; "
        f"fedbench report {task_file} --profile {profile} --out bench/results/{folder}"
    )
    return record(f"{folder}/report.md", command, task.expand())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Record the runs behind a committed `fedbench report`.")
    parser.add_argument("task", help="the task file, e.g. tasks/feroma_drift.yaml")
    parser.add_argument("--profile", default=PAPER_PROFILE, help="the profile the report is of, e.g. reduced")
    cli = parser.parse_args()
    print(record_report(cli.task, cli.profile))
