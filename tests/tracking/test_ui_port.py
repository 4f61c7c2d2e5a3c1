"""`fedbench ui --port` (issue 47, item 7): a bad port is refused when parsed, a taken one before a server starts,
so the command never prints another server's URLs as its own."""

from __future__ import annotations

import socket

import pytest

from fedbench.cli import main
from fedbench.core.errors import ConfigError
from fedbench.tracking.ui import checked_port


@pytest.mark.parametrize("port", ["70000", "0", "-1", "eighty"])
def test_a_port_outside_1_to_65535_is_refused_when_parsed(port, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["ui", "--port", port])
    assert stop.value.code == 2
    assert "a port number in 1..65535" in capsys.readouterr().err


def test_a_taken_port_is_refused_before_a_server_starts():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"--port: got {port}; allowed: a free port"):
            checked_port(port)
    assert checked_port(port) == port  # free again once released
