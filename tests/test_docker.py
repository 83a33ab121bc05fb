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
    # the runtime stage takes no package source from the context, only the examples
    assert context_sources(runtime) == ["docker/examples"]
    # every top-level package of the wheel is in the build stage's context
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = set(context_sources(build))
    for pattern in include:
        assert pattern.rstrip("*") in copied, pattern
    assert {"pyproject.toml", "README.md"} <= copied


def test_compose_parses_and_points_at_real_files():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    assert {"kafka", "node-a", "node-b", "node-c"} <= set(services)
    for name, svc in services.items():
        if "build" not in svc:
            continue
        context = (DOCKER / svc["build"]["context"]).resolve()
        assert (context / svc["build"]["dockerfile"]).is_file(), name
        for arg in svc["command"]:
            m = re.match(r"^/app/examples/(.+)$", arg)
            if m:
                assert (DOCKER / "examples" / m.group(1)).is_file(), arg


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
