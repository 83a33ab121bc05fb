"""docker/ is checked as far as a machine without a Docker engine allows."""

import re
import subprocess
import tomllib
from pathlib import Path

import yaml

from broker_node.config import NodeSettings
from dls.space import ContentSpace

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"


def dockerfile_stages() -> dict[str, list[str]]:
    """The Dockerfile's instructions by stage name (an unnamed stage is its index)."""
    stages: dict[str, list[str]] = {}
    current: list[str] = []
    for line in (DOCKER / "Dockerfile").read_text().splitlines():
        if line.startswith("FROM "):
            parts = line.split()
            name = parts[3] if len(parts) > 3 and parts[2].upper() == "AS" else str(len(stages))
            current = stages.setdefault(name, [])
        elif line.strip() and not line.startswith("#"):
            current.append(line)
    return stages


def context_sources(lines: list[str]) -> list[str]:
    """What the COPY lines among ``lines`` take from the build context (not from a stage)."""
    out = []
    for line in lines:
        words = line.split()
        if words[0] == "COPY" and not any(w.startswith("--from=") for w in words):
            out += [w for w in words[1:-1] if not w.startswith("--")]
    return out


def test_dockerfile_copies_only_what_exists():
    sources = [src for lines in dockerfile_stages().values() for src in context_sources(lines)]
    assert sources
    for src in sources:
        assert (ROOT / src).exists(), src


def test_dockerfile_installs_the_wheel_its_first_stage_builds():
    stages = dockerfile_stages()
    assert list(stages)[0] == "wheel"
    build, runtime = stages["wheel"], stages[list(stages)[-1]]
    assert any(line.startswith("RUN pip wheel") and "--no-deps" in line and "-w /wheels ." in line
               for line in build)
    assert "COPY --from=wheel /wheels /wheels" in runtime
    assert any(line.startswith("RUN pip install") and "/wheels/*.whl" in line
               for line in runtime)
    # the kernels are compiled in the image, after the install (docker/images.sh does too)
    warm = [i for i, line in enumerate(runtime) if "warm_up_kernels" in line]
    install = [i for i, line in enumerate(runtime) if line.startswith("RUN pip install")]
    assert warm and warm[0] > install[0]
    # the runtime stage takes no package source from the context, only the examples
    assert context_sources(runtime) == ["docker/examples"]
    # every top-level package of the wheel is in the build stage's context
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = set(context_sources(build))
    for pattern in include:
        assert pattern.rstrip("*") in copied, pattern
    assert {"pyproject.toml", "README.md"} <= copied


def _compose(env: dict[str, str] | None = None) -> dict:
    """docker/compose.yaml with ``${VAR:-default}`` substituted as compose does."""
    env = env or {}
    text = re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: env.get(m.group(1)) or m.group(2),
                  (DOCKER / "compose.yaml").read_text())
    assert "${" not in text  # every variable has a default
    return yaml.safe_load(text)


def test_compose_parses_and_points_at_real_files():
    services = _compose()["services"]
    assert set(services) == {"kafka-1", "kafka-2", "kafka-3", "node-a", "node-b", "node-c"}
    for name, svc in services.items():
        assert svc["network_mode"] == "host", name  # the engine of CI has no bridge
        assert svc["restart"] == "unless-stopped", name  # a killed container comes back
        if "build" in svc:
            context = (DOCKER / svc["build"]["context"]).resolve()
            assert (context / svc["build"]["dockerfile"]).is_file(), name
        for arg in svc.get("command", []):
            m = re.match(r"^/app/examples/(.+)$", arg)
            if m:
                assert (DOCKER / "examples" / m.group(1)).is_file(), arg


def test_compose_takes_public_images_or_the_local_ones():
    public = _compose()["services"]
    assert {public[f"kafka-{i}"]["image"] for i in (1, 2, 3)} == {"apache/kafka:4.2.0"}
    assert {public[f"node-{n}"]["image"] for n in "abc"} == {"dlsroute"}  # built: Dockerfile
    local = _compose({"DLS_KAFKA_IMAGE": "dlsroute-kafka:1", "DLS_NODE_IMAGE": "dlsroute-node:2"})
    assert {s["image"] for s in local["services"].values()} == {"dlsroute-kafka:1",
                                                               "dlsroute-node:2"}


def test_compose_runs_three_brokers_and_two_replicas_of_each_node():
    services = _compose({"DLS_BROKER_PORT_2": "39094", "DLS_CONTROLLER_PORT_3": "39097"})[
        "services"]
    brokers = [services[f"kafka-{i}"]["environment"] for i in (1, 2, 3)]
    assert [b["KAFKA_NODE_ID"] for b in brokers] == ["1", "2", "3"]
    voters = {b["KAFKA_CONTROLLER_QUORUM_VOTERS"] for b in brokers}
    assert voters == {"1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:39097"}
    clients = [b["KAFKA_LISTENERS"].split(",")[0].rpartition(":")[2] for b in brokers]
    assert clients == ["9092", "39094", "9096"]
    for i, b in enumerate(brokers):
        assert b["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://127.0.0.1:{clients[i]}"
        assert b["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert b["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3"
        assert b["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "3"
        assert b["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
        assert b["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3"
        assert b["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
        assert len({b["CLUSTER_ID"] for b in brokers}) == 1
    for n in "abc":
        node = services[f"node-{n}"]
        assert node["deploy"]["replicas"] == 2
        # every replica serves metrics on a free port of its own: none collide
        assert node["command"][-2:] == ["--metrics-port", "0"]
        assert node["environment"]["DLS_NODE_BOOTSTRAP"].split(",") == [
            f"127.0.0.1:{p}" for p in clients]
        assert set(node["depends_on"]) == {"kafka-1", "kafka-2", "kafka-3"}


def test_example_configs_are_sharded_alike():
    shards = {tomllib.loads(t.read_text()).get("shards", 1)
              for t in (DOCKER / "examples").glob("node-*.toml")}
    assert shards == {2}  # replicas of a node share its shards; clients use --shards 2


def test_example_configs_load():
    space = ContentSpace.from_json(DOCKER / "examples" / "space.json")
    assert len(space.attributes) == 4
    for toml in sorted((DOCKER / "examples").glob("node-*.toml")):
        data = tomllib.loads(toml.read_text())
        data["space"] = str(DOCKER / "examples" / "space.json")
        settings = NodeSettings(**data)
        assert settings.node == toml.stem.split("-")[1].upper()


def test_example_space_is_the_demo_space():
    import json

    from dlsroute.demo import DEMO_SPACE

    assert json.loads((DOCKER / "examples" / "space.json").read_text()) == DEMO_SPACE


# -- docker/images.sh and the Kafka image's entry script ------------------------------------
def _bash(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", *args], capture_output=True, text=True, timeout=120,  # noqa: S603,S607
                          check=False, env=env)


def test_the_scripts_parse():
    for script in ("images.sh", "engine.sh", "image/kafka-entry.sh"):
        proc = _bash("-n", str(DOCKER / script))
        assert proc.returncode == 0, (script, proc.stderr)


def test_image_tags_are_content_hashes_of_this_checkout():
    first, again = _bash(str(DOCKER / "images.sh"), "env"), _bash(str(DOCKER / "images.sh"), "env")
    assert first.returncode == 0, first.stderr
    assert first.stdout == again.stdout  # the same inputs, the same tags
    tags = dict(line.split("=", 1) for line in first.stdout.split())
    assert set(tags) == {"DLS_KAFKA_IMAGE", "DLS_NODE_IMAGE"}
    assert re.fullmatch(r"dlsroute-kafka:[0-9a-f]{16}", tags["DLS_KAFKA_IMAGE"])
    assert re.fullmatch(r"dlsroute-node:[0-9a-f]{16}", tags["DLS_NODE_IMAGE"])


def test_the_node_image_takes_the_dependencies_but_pyspark():
    script = (DOCKER / "images.sh").read_text()
    assert "NODE_LEFT_OUT=pyspark" in script
    # the mirror is read from the machine's apt sources at build time, never written here
    assert "deb.debian.org" not in script


def test_the_kafka_entry_script_maps_the_environment_as_apache_kafka_does(tmp_path: Path):
    fake_java = tmp_path / "bin" / "java"
    fake_java.parent.mkdir()
    fake_java.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/java.calls\n')
    fake_java.chmod(0o755)
    env = {"PATH": f"{fake_java.parent}:/usr/bin:/bin", "DLS_KAFKA_HOME": str(tmp_path),
           "DLS_KAFKA_PROPS": str(tmp_path / "server.properties"), "CLUSTER_ID": "abc",
           "KAFKA_NODE_ID": "2", "KAFKA_PROCESS_ROLES": "broker,controller",
           "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@127.0.0.1:39093,2@127.0.0.1:39095",
           "KAFKA_LOG_DIRS": str(tmp_path / "data"), "KAFKA_SOME__NAME___X": "y",
           "KAFKA_HEAP_OPTS": "-Xmx64m"}
    proc = _bash(str(DOCKER / "image" / "kafka-entry.sh"), env=env)
    assert proc.returncode == 0, proc.stderr
    props = dict(line.split("=", 1) for line in (tmp_path / "server.properties").read_text()
                 .splitlines())
    assert props == {"node.id": "2", "process.roles": "broker,controller",
                     "controller.quorum.voters": "1@127.0.0.1:39093,2@127.0.0.1:39095",
                     "log.dirs": str(tmp_path / "data"), "some_name-x": "y"}
    format_call, start_call = (tmp_path / "java.calls").read_text().splitlines()
    assert "StorageTool format --ignore-formatted -t abc" in format_call
    assert "--standalone" not in format_call  # static voters: no single-voter format
    assert start_call.startswith("-Xmx64m") and start_call.endswith(
        f"kafka.Kafka {tmp_path}/server.properties")


def test_the_debian_mirror_is_read_from_the_apt_sources(tmp_path: Path):
    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\nURIs: http://security.example/debian-security\n"
                      "Suites: bookworm-security\nComponents: main\n\n"
                      "Types: deb\n# a comment\nURIs: http://mirror.example/debian\n"
                      "Suites: bookworm bookworm-updates\nComponents: main contrib\n")
    one_line = tmp_path / "sources.list"
    one_line.write_text("# deb http://old.example/debian bookworm main\n"
                        "deb [arch=amd64] http://line.example/debian bookworm main\n")
    other = tmp_path / "other.list"
    other.write_text("deb https://vendor.example/apt stable main\n")
    env = {"PATH": "/usr/bin:/bin"}
    for files, want in [(f"{other} {deb822}", "http://mirror.example/debian"),
                        (f"{other} {one_line}", "http://line.example/debian")]:
        proc = _bash(str(DOCKER / "images.sh"), "mirror", env={**env, "DLS_APT_SOURCES": files})
        assert (proc.returncode, proc.stdout.strip()) == (0, want), proc.stderr
    proc = _bash(str(DOCKER / "images.sh"), "mirror", env={**env, "DLS_APT_SOURCES": str(other)})
    assert proc.returncode != 0 and "no deb source of bookworm" in proc.stderr
