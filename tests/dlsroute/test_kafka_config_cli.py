"""Every Kafka-facing command takes ``--kafka-config FILE``, and a bad file is one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlsroute.cli import build_parser, main

KAFKA_COMMANDS = ["node", "subscribe", "unsubscribe", "publish", "listen", "replay", "demo",
                  "spark-map", "workload", "analyze"]


@pytest.mark.parametrize("command", KAFKA_COMMANDS)
def test_every_kafka_command_takes_kafka_config(command: str) -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    parser = sub.choices[command]  # type: ignore[attr-defined]
    assert any("--kafka-config" in a.option_strings for a in parser._actions), command


def test_a_bad_file_fails_before_any_connection(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.passwd=x\n")
    space = tmp_path / "space.json"
    space.write_text('{"attributes": [{"name": "p", "type": "numeric", "low": 0, '
                     '"high": 10, "granules": 4}]}')
    code = main(["subscribe", "--bootstrap", "127.0.0.1:1", "--space", str(space),
                 "--node", "A", "--client", "alice", "--where", "p < 3",
                 "--kafka-config", str(bad)])
    assert code == 2
    err = capsys.readouterr().err
    assert "bad.properties:2" in err and "sasl.passwd" in err
    code = main(["publish", "--bootstrap", "127.0.0.1:1", "--space", str(space),
                 "--node", "A", "--client", "alice", "--attrs", '{"p": 1}',
                 "--kafka-config", str(tmp_path / "missing.properties")])
    assert code == 2 and "missing.properties" in capsys.readouterr().err


def test_demo_kafka_config_needs_bootstrap(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--kafka", "--kafka-config", str(tmp_path / "x")]) == 2
    assert "--bootstrap" in capsys.readouterr().err
