"""docker/ is checked as far as a machine without a Docker engine allows."""

import re
import tomllib
from pathlib import Path

import yaml

from broker_node.config import NodeSettings
from dls.space import ContentSpace

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"


def test_dockerfile_copies_only_what_exists():
    text = (DOCKER / "Dockerfile").read_text()
    sources = [line.split()[1:-1] for line in text.splitlines() if line.startswith("COPY ")]
    assert sources
    for srcs in sources:
        for src in srcs:
            assert (ROOT / src).exists(), src


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
