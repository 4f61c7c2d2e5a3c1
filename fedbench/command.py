"""The `fedbench` command's process: `run` and `sweep` do their work in a child process of a session of its own.

A local Ray's servers (GCS, raylet) are started by the process that calls `ray.init` and stay in its process group.
A signal to that group (what `timeout`, systemd, Slurm and `kill -- -PGID` send) then killed them together with the
command, which hung for a minute waiting for its GCS before it could stop its trials (issue 47, item 5). Here the
command's own process only waits: the signals it gets (SIGINT, SIGTERM, SIGHUP) are passed on to the child as the
stop it handles like Ctrl-C, and Ray's servers, in the child's session, are stopped by the child. Should this process
be killed outright, the child is killed with it (Linux's parent-death signal), as the command itself was before.

Imports only the standard library before it knows it is the child, so that the waiting process costs no more than
an interpreter.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys

SUPERVISED = ("run", "sweep")
"""The commands that may start a local Ray (the others read the store or serve its UI, and stop as they are)."""
CHILD_ENV = "FEDBENCH_COMMAND_CHILD"
"""Set in the child's environment: it runs the command itself (and its own children, such as tests' commands, start
afresh only where they are called as a new command with this unset)."""
PASSED_ON = {signal.SIGINT: signal.SIGINT, signal.SIGTERM: signal.SIGTERM, signal.SIGHUP: signal.SIGTERM}
"""Signal this process gets -> the one its child is sent: both of which the commands handle as Ctrl-C (a closed
terminal's SIGHUP included, which would otherwise end the child without marking its runs stopped)."""
PR_SET_PDEATHSIG = 1


def entry() -> None:
    """The `fedbench` command (console script and `python -m fedbench`)."""
    argv = sys.argv[1:]
    if needs_own_session(argv):
        sys.exit(run_in_own_session(argv))
    from fedbench.cli import entry as command

    command()


def needs_own_session(argv: list[str]) -> bool:
    """A `run` or `sweep` that trains (not a dry run), called as a command on a POSIX system, not already the child."""
    return (
        os.name == "posix"
        and CHILD_ENV not in os.environ
        and bool(argv)
        and argv[0] in SUPERVISED
        and "--dry-run" not in argv
        and not {"-h", "--help"} & set(argv)
    )


def run_in_own_session(argv: list[str]) -> int:
    """Run `fedbench argv` in a child that leads a new session, pass stop signals on, and exit as it exits."""
    parent = os.getpid()

    def die_with_parent() -> None:  # in the child, before it runs the command
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0 or os.getppid() != parent:
            os._exit(1)  # no parent-death signal on this kernel, or the parent is already gone: do not run unwatched

    child = subprocess.Popen(
        [sys.executable, "-m", "fedbench", *argv],
        env={**os.environ, CHILD_ENV: "1"},
        start_new_session=True,
        preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
    )
    for received, sent in PASSED_ON.items():
        signal.signal(received, lambda signum, frame, sent=sent: child.send_signal(sent))
    code = child.wait()
    return code if code >= 0 else 128 - code  # killed by signal N: the shell's 128 + N
