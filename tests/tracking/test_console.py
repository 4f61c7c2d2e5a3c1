"""What `fedbench run` prints where its output is not a terminal (a log file, CI)."""

import io

from rich.console import Console

import fedbench.tracking.console as console_module
from fedbench.runtime import run_spec
from fedbench.tracking.run_callbacks import run_callbacks
from tests.conftest import tiny_spec


def test_a_log_file_gets_a_plain_line_for_the_rounds_not_minutes_of_silence(monkeypatch):
    """Piped to a file, `fedbench run` printed nothing until a run ended (issue 47, item 10): there a plain line says
    the round and the latest accuracy, at most every PLAIN_EVERY_S (0 here: every round)."""
    monkeypatch.setattr(console_module, "PLAIN_EVERY_S", 0.0)
    out = io.StringIO()
    spec = tiny_spec(rounds=3)
    run_spec(spec, callbacks=run_callbacks(1, Console(file=out, width=200), track=False)(1, spec))
    lines = out.getvalue().splitlines()
    assert [line.split(": round ")[1].split()[0] for line in lines[:3]] == ["1/3", "2/3", "3/3"]
    assert lines[0].startswith(f"[1/1] {spec.label}: round 1/3 acc_local_mean=0.")
    assert lines[3].startswith(f"[1/1] {spec.label}: acc_local_mean=")  # then the result line
    assert "\x1b" not in out.getvalue()


def test_a_terminal_gets_no_plain_lines(monkeypatch):
    monkeypatch.setattr(console_module, "PLAIN_EVERY_S", 0.0)
    out = io.StringIO()
    spec = tiny_spec(rounds=2)
    terminal = Console(file=out, width=200, force_terminal=True)
    run_spec(spec, callbacks=run_callbacks(1, terminal, track=False)(1, spec))
    assert ": round " not in out.getvalue()


def test_a_narrow_console_wraps_the_configuration_instead_of_cutting_what_tells_rows_apart():
    """`client_fraction=1…` / `client_fraction=0…` (issue 47, item 10): the column is folded, never cut."""
    from fedbench.core.callbacks import RunResult
    from fedbench.core.metrics import ACC_LOCAL_MEAN, FINAL_PREFIX
    from fedbench.tracking.console import results_table

    results = [
        RunResult(
            tiny_spec(algorithm={"name": "fedavg", "client_fraction": f}),
            "FINISHED",
            [],
            {FINAL_PREFIX + ACC_LOCAL_MEAN: a},
        )
        for f, a in ((1.0, 0.9), (0.5, 0.8))
    ]
    out = io.StringIO()
    Console(file=out, width=60).print(results_table(results))
    text = out.getvalue()
    cells = "".join(line.split("│")[1] for line in text.splitlines() if line.count("│") > 2)
    assert "client_fraction=1.0" in cells.replace(" ", "") and "client_fraction=0.5" in cells.replace(" ", "")
