"""The ``dlsroute`` command line: ``labels``, and errors printed on one line with status 2."""

import json

from dlsroute.cli import main

SPACE_SPEC = {"attributes": [
    {"name": "price", "type": "numeric", "low": 0, "high": 100, "granules": 10},
    {"name": "sym", "type": "discrete", "values": ["A", "B"]}]}


def write(tmp_path, name, content):
    p = tmp_path / name
    p.write_text(content if isinstance(content, str) else json.dumps(content))
    return p


def test_cli_reports_bad_space_clearly(tmp_path, capsys):
    rc = main(["labels", "--space", str(write(tmp_path, "s.json", {"attributes": []})),
               "--where", "x > 1"])
    assert rc == 2
    assert "attributes must be a non-empty list" in capsys.readouterr().err


def test_labels_cli(tmp_path, capsys):
    space = write(tmp_path, "s.json", SPACE_SPEC)
    assert main(["labels", "--space", str(space), "--where", "price < 10 and sym = B"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["1", "0000-1", "boundary"]  # price < 10 ends inside cell 0
    assert lines[1].startswith("# 1 labels, 1 boundary (100.0 %")
    where = '{"any": [[{"attr": "price", "op": "<", "value": 30}], ' \
            '[{"attr": "sym", "op": "!=", "value": "A"}]]}'
    assert main(["labels", "--space", str(space), "--where", where]) == 0
    lines = capsys.readouterr().out.splitlines()
    # cells 0-1 of price x both syms are interior (price < 30 covers [0, 20)), cell 2 x A is
    # boundary; sym = B is interior in every price cell
    assert len(lines) == 14 and lines[-1].startswith("# 13 labels, 1 boundary (7.7 %")
    assert "2 alternative(s)" in lines[-1]
    assert main(["labels", "--space", str(space), "--event",
                 '{"price": 99, "sym": "A"}']) == 0
    assert capsys.readouterr().out.split() == ["18", "1001-0"]


def test_replay_group_option_is_checked_before_anything_runs(tmp_path, capsys):
    rc = main(["replay", "--bootstrap", "127.0.0.1:1", "--space", "s.json", "--topology",
               "t.json", "--ops", "o.jsonl", "--out", str(tmp_path / "o"), "--attach",
               "--group", "A-without-equals"])
    assert rc == 2
    assert "--group must be NODE=GROUP, got 'A-without-equals'" in capsys.readouterr().err


def test_replay_attach_refuses_a_group_for_a_node_not_in_the_topology(tmp_path, capsys):
    # Checked before any consumer is made: no Kafka is needed (the bootstrap is a dead port).
    topo = {"nodes": ["A", "B"], "links": [["A", "B"]]}
    rc = main(["replay", "--bootstrap", "127.0.0.1:1",
               "--space", str(write(tmp_path, "s.json", SPACE_SPEC)),
               "--topology", str(write(tmp_path, "t.json", topo)),
               "--ops", str(write(tmp_path, "o.jsonl", "")), "--out", str(tmp_path / "o"),
               "--attach", "--group", "Z=some-group"])
    assert rc == 2
    assert "--group names a node not in the topology: 'Z'" in capsys.readouterr().err


def test_node_metrics_host_comes_from_the_option_then_the_environment(monkeypatch):
    """``--metrics-host`` overrides DLS_NODE_METRICS_HOST, which overrides the file."""
    from pathlib import Path

    from broker_node.config import load_settings
    from dlsroute.cli import build_parser

    config = Path(__file__).resolve().parents[2] / "docker" / "examples" / "node-a.toml"
    every = "0.0.0.0"  # noqa: S104 - the value under test, nothing binds here
    args = build_parser().parse_args(["node", "--config", str(config),
                                      "--metrics-host", every])
    assert args.metrics_host == every
    monkeypatch.setenv("DLS_NODE_METRICS_HOST", "10.0.0.5")
    assert load_settings(config).metrics_host == "10.0.0.5"
    assert load_settings(config, metrics_host=args.metrics_host).metrics_host == every
    monkeypatch.delenv("DLS_NODE_METRICS_HOST")
    assert load_settings(config, metrics_host=None).metrics_host == "127.0.0.1"


def test_sdk_commands_write_the_clients_own_topics_with_client_inputs(tmp_path):
    from dlsroute.cli import _sdk_client, build_parser

    spec = tmp_path / "space.json"
    spec.write_text(json.dumps({"attributes": [
        {"name": "x", "type": "numeric", "low": 0, "high": 10, "granules": 4}]}))
    base = ["--space", str(spec), "--node", "A", "--client", "alice",
            "--bootstrap", "127.0.0.1:1"]
    for argv, topic in [(base, "dls.node.A.publish"),
                        (base + ["--client-inputs"], "dls.node.A.client.alice.publish")]:
        args = build_parser().parse_args(["publish", *argv])
        client = _sdk_client(args)
        try:
            assert client._input("A", "publish") == topic
        finally:
            client._producer.purge()


def test_sdk_commands_take_the_networks_shards(tmp_path):
    """The example configs of docker/ are sharded: the SDK commands must split likewise."""
    from dlsroute.cli import _sdk_client, build_parser

    spec = tmp_path / "space.json"
    spec.write_text(json.dumps({"attributes": [
        {"name": "x", "type": "numeric", "low": 0, "high": 10, "granules": 4}]}))
    base = ["--space", str(spec), "--node", "A", "--client", "alice",
            "--bootstrap", "127.0.0.1:1"]
    for argv, shards in [(base, 1), (base + ["--shards", "2"], 2)]:
        client = _sdk_client(build_parser().parse_args(["subscribe", *argv, "--where", "x < 5"]))
        try:
            assert client.shards == shards
        finally:
            client._producer.purge()


def test_replication_options_reach_the_node_the_sdk_and_access(tmp_path, capsys):
    """``--replication-factor``/``--min-insync-replicas``: checked, naming the field."""
    from pathlib import Path

    from broker_node.config import load_settings
    from dlsroute.cli import _sdk_client, build_parser

    config = Path(__file__).resolve().parents[2] / "docker" / "examples" / "node-a.toml"
    args = build_parser().parse_args(["node", "--config", str(config),
                                      "--replication-factor", "3",
                                      "--min-insync-replicas", "2"])
    s = load_settings(config, replication_factor=args.replication_factor,
                      min_insync_replicas=args.min_insync_replicas)
    assert s.topic_replication() == {"replication": 3, "min_insync": 2}
    spec = write(tmp_path, "space.json", SPACE_SPEC)
    args = build_parser().parse_args(["publish", "--space", str(spec), "--node", "A",
                                      "--client", "alice", "--bootstrap", "127.0.0.1:1",
                                      "--replication-factor", "3"])
    client = _sdk_client(args)
    try:
        assert client._replication == {"replication": 3, "min_insync": None}
    finally:
        client._producer.purge()
    assert main(["publish", "--space", str(spec), "--node", "A", "--client", "alice",
                 "--replication-factor", "0", "--attrs", "{}"]) == 2
    assert "replication_factor must be an integer >= 1" in capsys.readouterr().err
    admin_conf = write(tmp_path, "admin.properties", "")
    assert main(["access", "add-operator", "--admin-config", str(admin_conf), "--name", "op",
                 "--replication-factor", "1", "--min-insync-replicas", "2"]) == 2
    assert ("min_insync_replicas (2) must not exceed replication_factor (1)"
            in capsys.readouterr().err)
