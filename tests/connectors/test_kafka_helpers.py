"""Kafka helpers that fail cleanly without a broker (no broker needed)."""

from __future__ import annotations

import pytest

from connectors.exceptions import ConnectorError
from connectors.kafka import ensure_topics


def test_ensure_topics_without_a_broker_names_it_and_the_timeout() -> None:
    # Nothing listens on port 1: every metadata attempt fails until the deadline.
    with pytest.raises(ConnectorError,
                       match=r"cannot read topic metadata from 127\.0\.0\.1:1 within 1\.5s"):
        ensure_topics("127.0.0.1:1", ["dls.x"], timeout=1.5)
