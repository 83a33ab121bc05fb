"""The tests' port choice (``tests.containers.free_ports``): free now, and out of the kernel's
ephemeral range, where an outgoing connection could take a port before a server binds it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests import containers


def test_free_ports_are_free_and_under_the_ephemeral_range() -> None:
    offsets = (0, 1, 1000, 1002)
    for _ in range(20):
        p = containers.free_ports(offsets)
        assert p >= containers.LOWEST_PORT
        assert p + max(offsets) < containers.ephemeral_low()
        for o in offsets:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + o))  # raises when the port is taken


def test_a_taken_port_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", containers.free_port()))
        taken = squatter.getsockname()[1]
        draws = iter([taken, taken, taken + 1])  # the candidates, in the order drawn

        class Draws:
            def randrange(self, low: int, high: int) -> int:
                return next(draws)

        monkeypatch.setattr(containers.random, "SystemRandom", Draws)
        assert containers.free_ports((0,)) == taken + 1


def test_the_range_is_read_from_the_kernel(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    proc = tmp_path / "ip_local_port_range"
    proc.write_text("40000\t60999\n")
    monkeypatch.setattr(containers, "EPHEMERAL_RANGE", proc)
    assert containers.ephemeral_low() == 40000
    proc.write_text("garbage")
    assert containers.ephemeral_low() == 32768
    monkeypatch.setattr(containers, "EPHEMERAL_RANGE", tmp_path / "absent")
    assert containers.ephemeral_low() == 32768
