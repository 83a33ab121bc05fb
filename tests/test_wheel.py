"""The package installs from its wheel and runs from there, away from the repository.

The wheel is built from the files the Dockerfile's build stage copies (so the image builds
the same wheel), installed with ``--no-deps`` into a fresh venv, and run from a folder
outside the repository. The fresh venv reaches the shared venv's dependencies (numpy,
fastavro, confluent-kafka, ...) through a ``.pth`` line naming its site-packages; ``.pth``
files inside that folder are not processed, so the shared venv's editable install of this
project is not: ``connectors`` and ``schemas`` must come from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np

from connectors.serde import encode_label_subscription, encode_raw_event
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.space import ContentSpace
from tests.test_docker import context_sources, dockerfile_stages

ROOT = Path(__file__).resolve().parents[1]
SPACE = {"attributes": [
    {"name": "price", "type": "numeric", "low": 0, "high": 100, "granules": 10},
    {"name": "sym", "type": "discrete", "values": ["AAPL", "IBM", "MSFT"]}]}
WHERE = "price < 25 and sym in (IBM, MSFT)"
EVENT = {"price": 12.5, "sym": "IBM"}

ROUND_TRIP = """
import json, sys
import numpy as np
import connectors, schemas
from connectors.serde import (SCHEMA_DIR, SERDE, decode_label_subscription, decode_raw,
                              decode_raw_event, encode_label_subscription, encode_raw_event)
event = encode_raw_event("A", "alice", "e1", {"price": 12.5, "n": 7, "sym": "IBM"}, b"pay")
sub = encode_label_subscription("alice", "s1", np.array([3, 2**64 - 1], dtype=np.uint64),
                                "price < 25")
back = decode_raw_event(event)
labels = decode_label_subscription(sub)["labels"].tolist()
raw = decode_raw(b'{"node": "A", "client": "c", "id": "u1"}', "unsubscription")
json.dump({"connectors": connectors.__file__, "schemas": schemas.__file__,
           "schema_dir": str(SCHEMA_DIR), "names": list(SERDE.names),
           "event": event.hex(), "sub": sub.hex(),
           "back": {**back, "payload": back["payload"].hex()},
           "labels": labels, "raw": raw}, sys.stdout)
"""


def _run(args: list[str | Path], cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 300) -> str:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,  # noqa: S603
                          text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{args} failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return proc.stdout


def _build_wheel(tmp: Path) -> Path:
    """The wheel, built by pip from a copy of the Dockerfile build stage's sources."""
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in context_sources(dockerfile_stages()["wheel"]):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, src / name)
    out = tmp / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", out, "."], src)
    (wheel,) = out.glob("dlsroute-*.whl")
    return wheel


def _fresh_venv(tmp: Path, wheel: Path) -> Path:
    """A new venv with the wheel installed and the shared venv's packages beside it."""
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], tmp)
    python = venv / "bin" / "python"
    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                                      "['purelib'])"], tmp).strip())
    assert purelib.is_relative_to(venv)
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
          "--no-index", wheel], tmp)
    shared = sysconfig.get_paths()["purelib"]  # this interpreter's: the shared venv's
    (purelib / "shared_venv.pth").write_text(shared + "\n")
    return venv


def test_the_wheel_installs_and_runs(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    avsc = {f"schemas/avro/{p.name}" for p in (ROOT / "schemas" / "avro").glob("*.avsc")}
    assert len(avsc) == 8 and avsc <= names
    assert {"schemas/__init__.py", "connectors/serde/__init__.py", "spark/pom.xml"} <= names
    java = {str(p.relative_to(ROOT)) for p in (ROOT / "spark" / "jvm").rglob("*.java")}
    assert java and java <= names
    assert not any(n.startswith(("tests/", "benchmarks/", "docker/")) for n in names)

    venv = _fresh_venv(tmp_path, wheel)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONNOUSERSITE"] = "1"
    (elsewhere / "space.json").write_text(json.dumps(SPACE))

    # a serde round trip: the wire bytes are those of the repository's code
    out = json.loads(_run([venv / "bin" / "python", "-c", ROUND_TRIP], elsewhere, env))
    site = venv.resolve()
    for key in ("connectors", "schemas", "schema_dir"):
        assert Path(out[key]).resolve().is_relative_to(site), (key, out[key])
    assert Path(out["schema_dir"]).parts[-2:] == ("schemas", "avro")
    assert len(out["names"]) == 8
    assert out["event"] == encode_raw_event(
        "A", "alice", "e1", {"price": 12.5, "n": 7, "sym": "IBM"}, b"pay").hex()
    assert out["sub"] == encode_label_subscription(
        "alice", "s1", np.array([3, 2**64 - 1], dtype=np.uint64), "price < 25").hex()
    assert out["back"] == {"node": "A", "client": "alice", "id": "e1",
                           "attrs": {"price": 12.5, "n": 7, "sym": "IBM"},
                           "payload": b"pay".hex()}
    assert out["labels"] == [3, 2**64 - 1]
    assert out["raw"] == {"node": "A", "client": "c", "id": "u1"}

    # the console script
    space = ContentSpace.from_spec(SPACE)
    labels = Subscription(space, WHERE).labels().tolist()
    assert labels
    got = _run([venv / "bin" / "dlsroute", "labels", "--space", "space.json", "--where", WHERE],
               elsewhere, env)
    lines = got.splitlines()
    assert [line.split("\t")[:2] for line in lines[:-1]] == [
        [str(lab), space.format_label(lab)] for lab in labels]
    assert lines[-1].startswith(f"# {len(labels)} labels, ")
    label = event_label(space, EVENT)
    got = _run([venv / "bin" / "dlsroute", "labels", "--space", "space.json", "--event",
                json.dumps(EVENT)], elsewhere, env)
    assert got == f"{label}\t{space.format_label(label)}\n"

