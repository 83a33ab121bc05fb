"""docker/ is checked as far as a machine without a Docker engine allows."""

import re
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
