"""The Kafka settings file (``--kafka-config``): parsing, checks, masking, Spark's options."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.kafka_config import (
    KafkaConfigError,
    is_secret,
    load_kafka_config,
    masked,
    parse_kafka_config,
    spark_options,
)

GOOD = """# alice at node A
security.protocol = SASL_SSL
sasl.mechanism=SCRAM-SHA-512

! another comment style
sasl.username=client.alice
sasl.password=s3cret-Pass=word
"""


def test_a_good_file_parses_with_comments_blanks_and_spaces(tmp_path: Path) -> None:
    p = tmp_path / "alice.properties"
    p.write_text(GOOD)
    assert load_kafka_config(p) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "client.alice", "sasl.password": "s3cret-Pass=word"}
    assert load_kafka_config(None) == {}


@pytest.mark.parametrize("text, line, words", [
    ("security.protocol=SASL_SSL\nfoo.bar=1\n", 2, ["foo.bar", "'1'", "no setting"]),
    ("security.protocol=SASL_SSLX\n", 1, ["security.protocol", "SASL_SSLX"]),
    ("just some words\n", 1, ["not a key=value line", "just some words"]),
    ("=value\n", 1, ["not a key=value line"]),
    ("sasl.username=\n", 1, ["sasl.username", "empty value"]),
    ("bootstrap.servers=127.0.0.1:9092\n", 1, ["bootstrap.servers", "--bootstrap"]),
    ("group.id=g\n", 1, ["group.id", "itself"]),
    ("transactional.id=t\n", 1, ["transactional.id"]),
    ("client.id=a\nclient.id=b\n", 2, ["client.id", "repeats line 1"]),
    ("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n", None,
     ["sasl.username and sasl.password must be set"]),
    ("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=u\n"
     "sasl.password=p\nssl.ca.location=/no/such/ca.pem\n", 5, ["ssl.ca.location", "/no/such"]),
])
def test_a_bad_line_is_named_with_its_key_and_value(text: str, line: int | None,
                                                    words: list[str]) -> None:
    with pytest.raises(KafkaConfigError) as err:
        parse_kafka_config(text, "k.properties")
    msg = str(err.value)
    assert msg.startswith(f"k.properties:{line}:" if line else "k.properties:"), msg
    for w in words:
        assert w in msg, msg
    assert isinstance(err.value, ValueError)


def test_a_secret_never_shows_in_an_error() -> None:
    with pytest.raises(KafkaConfigError) as err:
        parse_kafka_config("sasl.password=hunter2\nsasl.password=hunter3\n", "k")
    assert "hunter" not in str(err.value) and "***" in str(err.value)
    with pytest.raises(KafkaConfigError) as err:
        parse_kafka_config("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                           "sasl.username=u\nsasl.password=hunter2\n"
                           "ssl.ca.location=/no/such.pem\n", "k")
    assert "hunter2" not in str(err.value)


def test_a_missing_file_names_its_path(tmp_path: Path) -> None:
    with pytest.raises(KafkaConfigError, match="no-such.properties"):
        load_kafka_config(tmp_path / "no-such.properties")


def test_masking() -> None:
    conf = {"sasl.username": "u", "sasl.password": "p", "ssl.key.password": "k",
            "sasl.oauthbearer.client.secret": "c", "ssl.ca.location": "/ca.pem",
            "kafka.sasl.jaas.config": "x required password=\"p\";"}
    out = masked(conf)
    assert out["sasl.username"] == "u" and out["ssl.ca.location"] == "/ca.pem"
    assert {out[k] for k in conf if k not in ("sasl.username", "ssl.ca.location")} == {"***"}
    assert not is_secret("security.protocol") and is_secret("sasl.password")


def test_spark_options_translate_scram_and_a_pem_ca(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    out = spark_options({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.username": "mapper", "sasl.password": "pw",
                         "ssl.ca.location": str(ca)})
    assert out == {
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                                  'required username="mapper" password="pw";',
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(ca)}
    plain = spark_options({"sasl.mechanisms": "PLAIN", "sasl.username": "u",
                           "sasl.password": "p"})
    assert "PlainLoginModule" in plain["kafka.sasl.jaas.config"]
    assert spark_options({}) == {}


@pytest.mark.parametrize("conf, field", [
    ({"sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism"),
    ({"sasl.mechanism": "PLAIN", "sasl.username": "u"}, "sasl.mechanism"),
    ({"linger.ms": "5"}, "linger.ms"),
    ({"sasl.mechanism": "PLAIN", "sasl.username": 'a"b', "sasl.password": "p"},
     "sasl.username"),
])
def test_spark_options_refuse_what_java_cannot_take(conf: dict[str, str], field: str) -> None:
    with pytest.raises(KafkaConfigError) as err:
        spark_options(conf)
    assert err.value.field == field
