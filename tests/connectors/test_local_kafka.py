"""The local Kafka helpers' errors (nothing is started: the port is refused first), and the
ports chosen for servers started later."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from connectors import local_kafka
from connectors.exceptions import ConnectorError, ConnectorSettingError, LocalKafkaError
from connectors.local_kafka import ensure_local_kafka, local_bootstrap, stop_local_kafka


@pytest.mark.parametrize("port", [0, 65535, -1])
def test_a_bad_port_is_refused_before_the_script_runs(port: int) -> None:
    for call in (ensure_local_kafka, stop_local_kafka):
        with pytest.raises(ConnectorSettingError, match=f"port must be in 1..65534, got {port}"
                           ) as err:
            call(port)
        assert isinstance(err.value, ValueError)
        assert (err.value.field, err.value.value) == ("port", port)


def test_local_kafka_error_is_a_connector_error_and_a_runtime_error() -> None:
    assert issubclass(LocalKafkaError, ConnectorError)
    assert issubclass(LocalKafkaError, RuntimeError)
    from connectors import local_kafka

    assert local_kafka.LocalKafkaError is LocalKafkaError  # still importable from there


@pytest.mark.parametrize("brokers, secure", [(0, False), (10, False), (True, False), (3, True)])
def test_a_bad_broker_count_is_refused_before_the_script_runs(brokers: int,
                                                               secure: bool) -> None:
    for call in (ensure_local_kafka, stop_local_kafka):
        with pytest.raises(ConnectorSettingError, match="brokers") as err:
            call(9092, brokers=brokers, secure=secure)
        assert (err.value.field, err.value.value) == ("brokers", brokers)


def test_the_local_bootstrap_lists_every_broker() -> None:
    assert local_bootstrap(9092) == "127.0.0.1:9092"
    assert local_bootstrap(29200, 3) == "127.0.0.1:29200,127.0.0.1:29201,127.0.0.1:29202"


# -- ports for servers started later: free now, under the kernel's ephemeral range ---------
def test_free_ports_are_free_and_under_the_ephemeral_range() -> None:
    offsets = (0, 1, 1000, 1002)
    for _ in range(20):
        p = local_kafka.free_ports(offsets)
        assert p >= local_kafka.LOWEST_PORT
        assert p + max(offsets) < local_kafka.ephemeral_low()
        for o in offsets:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + o))  # raises when the port is taken


def test_no_offsets_mean_one_port() -> None:
    p = local_kafka.free_ports(())
    assert local_kafka.LOWEST_PORT <= p < local_kafka.ephemeral_low()


def test_a_taken_port_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", local_kafka.free_port()))
        taken = squatter.getsockname()[1]
        draws = iter([taken, taken, taken + 1])  # the candidates, in the order drawn

        class Draws:
            def randrange(self, low: int, high: int) -> int:
                return next(draws)

        monkeypatch.setattr(local_kafka.random, "SystemRandom", Draws)
        assert local_kafka.free_ports((0,)) == taken + 1


def test_the_range_is_read_from_the_kernel(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    proc = tmp_path / "ip_local_port_range"
    proc.write_text("40000\t60999\n")
    monkeypatch.setattr(local_kafka, "EPHEMERAL_RANGE", proc)
    assert local_kafka.ephemeral_low() == 40000
    proc.write_text("garbage")
    assert local_kafka.ephemeral_low() == 32768
    monkeypatch.setattr(local_kafka, "EPHEMERAL_RANGE", tmp_path / "absent")
    assert local_kafka.ephemeral_low() == 32768
