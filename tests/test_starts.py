"""The unit tier's guard (tests/_starts.py): a test marked ``unit`` that starts a process or a
server fails, naming itself and what it started; any other test may start what it needs."""

from __future__ import annotations

import multiprocessing
import socket
import subprocess

import pytest

from tests._starts import StartedSomething


@pytest.mark.unit
def test_a_unit_test_that_starts_a_process_or_a_server_fails() -> None:
    me = "tests/test_starts.py::test_a_unit_test_that_starts_a_process_or_a_server_fails"
    with pytest.raises(StartedSomething, match=f"^{me} is marked unit but starts a subprocess"):
        subprocess.run(["true"], check=True)
    with pytest.raises(StartedSomething, match="starts a multiprocessing process"):
        multiprocessing.get_context("spawn").Process(target=print).start()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        with pytest.raises(StartedSomething, match="starts a server"):
            server.listen()


def test_a_test_not_marked_unit_starts_what_it_needs() -> None:
    assert subprocess.run(["true"], check=False).returncode == 0
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
