"""The local Kafka helpers' errors (nothing is started: the port is refused first)."""

from __future__ import annotations

import pytest

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
