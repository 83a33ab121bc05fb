"""The local Kafka helpers' errors (nothing is started: the port is refused first)."""

from __future__ import annotations

import pytest

from connectors.exceptions import ConnectorError, ConnectorSettingError, LocalKafkaError
from connectors.local_kafka import ensure_local_kafka, stop_local_kafka


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
