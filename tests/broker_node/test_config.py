import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from broker_node.config import NodeConfigError, NodeSettings, load_settings
from broker_node.exceptions import BrokerError


def write(tmp_path, text):
    p = tmp_path / "node.toml"
    p.write_text(text)
    return p


def test_file_then_environment_then_overrides(tmp_path, monkeypatch):
    p = write(tmp_path, 'node = "B"\nneighbours = ["A", "C"]\nspace = "s.json"\n'
                        'bootstrap = "file:1"\nbatch_size = 10\n')
    monkeypatch.setenv("DLS_NODE_BOOTSTRAP", "env:2")
    s = load_settings(p)
    assert s.bootstrap == "env:2" and s.batch_size == 10 and s.neighbours == ("A", "C")
    assert load_settings(p, bootstrap="cli:3").bootstrap == "cli:3"
    assert s.consumer_group == "dls-node-B"


def test_kafka_config_file_and_masked_secrets(tmp_path):
    (tmp_path / "k.properties").write_text(
        "# node A\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.username=node.A\nsasl.password=hunter2\n")
    p = write(tmp_path, f'node = "A"\nspace = "s.json"\n'
                        f'kafka_config = "{tmp_path / "k.properties"}"\n')
    s = load_settings(p)
    assert s.masked()["kafka"]["sasl.password"] == "***"
    assert s.masked()["kafka"]["sasl.username"] == "node.A"
    assert "hunter2" not in repr(s) and "hunter2" not in str(s.masked())
    assert s.kafka_security()["sasl.password"] == "hunter2"
    assert s.kafka_security()["security.protocol"] == "SASL_PLAINTEXT"
    assert load_settings(write(tmp_path, 'node = "A"\nspace = "s.json"\n')).kafka_security() == {}


def test_kafka_config_errors_name_the_file_and_line(tmp_path):
    (tmp_path / "bad.properties").write_text("security.protocol=SASL_SSL\nfoo.bar=1\n")
    with pytest.raises(NodeConfigError) as bad:
        NodeSettings(node="A", space="s.json", kafka_config=tmp_path / "bad.properties")
    assert bad.value.field == "kafka_config"
    assert "bad.properties:2" in str(bad.value) and "foo.bar" in str(bad.value)
    with pytest.raises(NodeConfigError, match="missing.properties"):
        NodeSettings(node="A", space="s.json", kafka_config=tmp_path / "missing.properties")


@pytest.mark.parametrize("text, fragment", [
    ('node = "a b"\nspace = "s.json"\n', "node"),
    ('node = "A"\nspace = "s.json"\nneighbours = ["B", "B"]\n', "neighbours"),
    ('node = "A"\nspace = "s.json"\nbatch_size = 0\n', "batch_size"),
    ('node = "A"\nspace = "s.json"\ncolour = "red"\n', "colour"),
    ('node = "A"\n', "space"),
    ('node = "A"\nspace = "s.json"\ndelivery = "maybe"\n', "delivery"),
    ('node = "A"\nspace = "s.json"\nproducer_queue_messages = 0\n', "producer_queue_messages"),
    ('node = "A"\nspace = "s.json"\nshared_delivery_partitions = -1\n',
     "shared_delivery_partitions"),
    ('node = "A"\nspace = "s.json"\nreplication_factor = 1\nmin_insync_replicas = 2\n',
     "min_insync_replicas (2) must not exceed replication_factor (1)"),
    ("node = \n", "cannot read node config"),
])
def test_bad_configs_name_the_field(tmp_path, text, fragment):
    with pytest.raises(BrokerError) as exc:
        load_settings(write(tmp_path, text))
    assert fragment in str(exc.value)


def test_an_override_left_out_does_not_hide_the_environment(tmp_path, monkeypatch):
    # the CLI passes bootstrap=None without --bootstrap: the environment still beats the file
    p = write(tmp_path, 'node = "B"\nspace = "s.json"\nbootstrap = "file:1"\nmetrics_port = 1\n')
    monkeypatch.setenv("DLS_NODE_BOOTSTRAP", "env:2")
    monkeypatch.setenv("DLS_NODE_NEIGHBOURS", '["A", "C"]')
    s = load_settings(p, bootstrap=None, metrics_port=None)
    assert (s.bootstrap, s.metrics_port, s.neighbours) == ("env:2", 1, ("A", "C"))


def test_settings_built_directly_read_no_file(tmp_path):
    p = write(tmp_path, 'node = "B"\nspace = "s.json"\nbootstrap = "file:1"\n')
    assert load_settings(p).bootstrap == "file:1"
    s = NodeSettings(node="A", space="t.json")
    assert (s.node, s.bootstrap, s.space) == ("A", "127.0.0.1:9092", Path("t.json"))
    with pytest.raises(ValidationError):  # frozen
        s.node = "B"


@pytest.mark.parametrize("kwargs, field, value, fragment", [
    ({"node": "A\n"}, "node", "A\n", "node must be [A-Za-z0-9_-]+, got 'A\\n'"),
    ({"node": "A", "neighbours": ("B", "x.y")}, "neighbours", ("B", "x.y"),
     "neighbour names must be [A-Za-z0-9_-]+, got 'x.y'"),
    ({"node": "A", "batch_size": 0}, "batch_size", 0, "greater than or equal to 1"),
    ({"node": "A", "update_threads": 0}, "update_threads", 0, "greater than or equal to 1"),
    ({"node": "A", "update_threads": 65}, "update_threads", 65, "less than or equal to 64"),
    ({"node": "A", "colour": "red"}, "colour", "red", "Extra inputs are not permitted"),
    ({"node": "A", "replication_factor": 0}, "replication_factor", 0,
     "greater than or equal to 1"),
    ({"node": "A", "min_insync_replicas": 0}, "min_insync_replicas", 0,
     "greater than or equal to 1"),
    ({"node": "A", "replication_factor": 2, "min_insync_replicas": 3}, "min_insync_replicas",
     3, "min_insync_replicas (3) must not exceed replication_factor (2)"),
])
def test_a_setting_that_cannot_be_used_is_a_node_config_error(kwargs, field, value, fragment):
    with pytest.raises(NodeConfigError) as exc:
        NodeSettings(space="s.json", **kwargs)
    assert isinstance(exc.value, BrokerError) and isinstance(exc.value, ValueError)
    assert not isinstance(exc.value, ValidationError)
    assert (exc.value.field, exc.value.value) == (field, value)
    assert str(exc.value).startswith(f"node config: {field}: ") and fragment in str(exc.value)


def test_a_missing_or_unreadable_file_is_named(tmp_path):
    for path in (tmp_path / "none.toml", tmp_path):
        with pytest.raises(NodeConfigError, match="cannot read node config") as exc:
            load_settings(path)
        assert (exc.value.field, exc.value.value) == ("config", str(path))


def test_replication_settings_reach_every_topic_the_node_creates(tmp_path, monkeypatch):
    """Unset: the cluster's defaults (None); set in the file or the environment: passed on."""
    assert NodeSettings(node="A", space="s.json").topic_replication() == {
        "replication": None, "min_insync": None}
    p = write(tmp_path, 'node = "A"\nspace = "s.json"\nreplication_factor = 3\n'
                        'min_insync_replicas = 2\n')
    assert load_settings(p).topic_replication() == {"replication": 3, "min_insync": 2}
    monkeypatch.setenv("DLS_NODE_MIN_INSYNC_REPLICAS", "3")
    assert load_settings(p).topic_replication() == {"replication": 3, "min_insync": 3}
    # min ISR alone: the cluster's replication factor is not known here, so not checked
    assert NodeSettings(node="A", space="s.json", min_insync_replicas=2).min_insync_replicas == 2


def test_update_threads_reach_the_client_bank(tmp_path):
    """NodeSettings.update_threads -> BrokerConfig -> the bank (built, not started)."""
    from broker_node.service import NodeService

    path = tmp_path / "space.json"
    path.write_text(json.dumps({"attributes": [
        {"name": "x", "type": "numeric", "low": 0, "high": 10, "granules": 4}]}))
    for threads in (1, 3):
        svc = NodeService(NodeSettings(node="A", space=path, update_threads=threads))
        assert svc.state.config.update_threads == threads
        assert svc.state._bank.update_threads == threads  # noqa: SLF001
