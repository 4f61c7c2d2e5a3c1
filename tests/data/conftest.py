"""Every data test runs offline and with its own download cache, whatever the machine allows."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path_factory):
    """Make any network use fail at once, and point FEDBENCH_CACHE at a fresh folder.

    A loader that finds no files tries torchvision's download; here that fails like on a machine without
    internet, and a developer's real ~/.cache/fedbench can neither serve nor receive files (downloads or
    decoded datasets). The cache lies outside the test's tmp_path, which tests use as a data root that must
    stay unwritten.
    """

    def refuse(*args, **kwargs):
        raise OSError("tests/data must not use the network")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setenv("FEDBENCH_CACHE", str(tmp_path_factory.mktemp("fedbench-cache")))
