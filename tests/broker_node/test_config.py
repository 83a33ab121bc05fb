import pytest

from broker_node.config import load_settings
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


def test_secrets_are_masked(tmp_path):
    p = write(tmp_path, 'node = "A"\nspace = "s.json"\nsasl_username = "u"\n'
                        'sasl_password = "hunter2"\n')
    s = load_settings(p)
    assert s.masked()["sasl_password"] == "***"
    assert "hunter2" not in repr(s)
    assert s.kafka_security()["sasl.password"] == "hunter2"


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
    ("node = \n", "cannot read node config"),
])
def test_bad_configs_name_the_field(tmp_path, text, fragment):
    with pytest.raises(BrokerError) as exc:
        load_settings(write(tmp_path, text))
    assert fragment in str(exc.value)
