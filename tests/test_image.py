"""The Docker-free image builder (hack/build-image.py, hack/oci_image.py) and the Dockerfile agree
on what matters: entry point, command, user, Python version, the installed package, ports and
environment. Both are parsed; nothing is built."""

from __future__ import annotations

import json
import re
import shlex
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "hack"))
import oci_image  # noqa: E402

SPEC = oci_image.KUBESODA_IMAGE
CONFIG = oci_image.kubesoda_config()
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def dockerfile(path: str = "Dockerfile") -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the final stage, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (REPO / path).read_text())
    stages: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, args = line.partition(" ")
        if op.upper() == "FROM":
            stages.append([])
        stages[-1].append((op.upper(), args.strip()))
    return stages[-1]


def instr(op: str) -> list[str]:
    return [a for o, a in dockerfile() if o == op]


def exec_form(args: str) -> list[str]:
    return json.loads(args) if args.startswith("[") else ["/bin/sh", "-c", args]


def test_entrypoint_and_cmd() -> None:
    assert exec_form(instr("ENTRYPOINT")[-1]) == CONFIG["Entrypoint"] == ["kubesoda"]
    assert exec_form(instr("CMD")[-1]) == CONFIG["Cmd"]
    # the entry point is the project's console script
    assert CONFIG["Entrypoint"][0] in PYPROJECT["project"]["scripts"]


def test_user() -> None:
    user = instr("USER")[-1]
    assert user == CONFIG["User"] == f"{SPEC['uid']}:{SPEC['uid']}"
    run = " ".join(instr("RUN"))
    assert f"--uid {SPEC['uid']}" in run  # the Dockerfile creates the user it switches to


def test_python_version_and_distribution() -> None:
    m = re.match(r"python:(\d+\.\d+)(?:\.\d+)?-slim-(\w+)", dockerfile()[0][1])
    assert m, dockerfile()[0]
    assert (m.group(1), m.group(2)) == (SPEC["python"], SPEC["distribution"])
    low = re.search(r">=\s*(\d+\.\d+)", PYPROJECT["project"]["requires-python"]).group(1)
    assert tuple(map(int, SPEC["python"].split("."))) >= tuple(map(int, low.split(".")))


def test_installed_package() -> None:
    installs = [a for a in instr("RUN") if "pip install" in a]
    pinned = {w.split("==")[0].split("[")[0]: w.split("==")[1] for a in installs for w in shlex.split(a) if "==" in w and not w.startswith("pip")}
    project = PYPROJECT["project"]
    assert SPEC["package"] == project["name"]
    assert pinned.get(project["name"]) == project["version"]


def test_environment_ports_and_labels() -> None:
    env = dict(kv.split("=", 1) for a in instr("ENV") for kv in shlex.split(a))
    image_env = dict(kv.split("=", 1) for kv in CONFIG["Env"])
    for k, v in env.items():
        assert image_env.get(k) == v, k
    assert sorted(int(p) for a in instr("EXPOSE") for p in a.split()) == sorted(SPEC["ports"])
    assert {f"{p}/tcp" for p in SPEC["ports"]} == set(CONFIG["ExposedPorts"])
    labels = dict(kv.split("=", 1) for a in instr("LABEL") for kv in shlex.split(a))
    assert labels == CONFIG["Labels"]


def test_dockerfile_copies_every_package_directory() -> None:
    where = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["where"]
    build = (REPO / "Dockerfile").read_text().split("\nFROM ", 2)[1]
    copied = {src.rstrip("/").removeprefix("./") for line in re.findall(r"^COPY (?!--from)(.+)$", build, re.M)
              for src in line.split()[:-1]}
    assert set(where) <= copied, set(where) - copied


def test_oci_archive_layout(tmp_path: Path) -> None:
    """The writer's archive is an OCI layout that names the image and points at its blobs."""
    import hashlib
    import tarfile

    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as t:
        info = tarfile.TarInfo("hello")
        t.addfile(info)
    out = tmp_path / "img.tar"
    digest = oci_image.write_archive(out, [layer], CONFIG, "ghcr.io/kubesoda/kubesoda:dev")
    with tarfile.open(out) as t:
        names = set(t.getnames())
        index = json.load(t.extractfile("index.json"))
        manifest_bytes = t.extractfile(f"blobs/sha256/{digest[7:]}").read()
        manifest = json.loads(manifest_bytes)
        config = json.load(t.extractfile("blobs/sha256/" + manifest["config"]["digest"][7:]))
    assert "oci-layout" in names
    assert hashlib.sha256(manifest_bytes).hexdigest() == digest[7:]
    ann = index["manifests"][0]["annotations"]
    assert ann["io.containerd.image.name"] == "ghcr.io/kubesoda/kubesoda:dev"
    assert ann["org.opencontainers.image.ref.name"] == "dev"
    assert config["config"] == CONFIG
    assert config["rootfs"]["diff_ids"] == [ly["digest"] for ly in manifest["layers"]]
    assert all(f"blobs/sha256/{ly['digest'][7:]}" in names for ly in manifest["layers"])


# ---------------------------------------------------------------- the example PEs' image
PE_SPEC = oci_image.PE_EXAMPLES_IMAGE
PE_CONFIG = oci_image.kubesoda_config(PE_SPEC)
PE_DOCKERFILE = "examples/pe/Dockerfile"


def pe_instr(op: str) -> list[str]:
    return [a for o, a in dockerfile(PE_DOCKERFILE) if o == op]


def test_pe_examples_image_agrees_with_its_dockerfile() -> None:
    assert exec_form(pe_instr("ENTRYPOINT")[-1]) == PE_CONFIG["Entrypoint"]
    assert not pe_instr("CMD") and "Cmd" not in PE_CONFIG
    assert pe_instr("USER")[-1] == PE_CONFIG["User"] == f"{PE_SPEC['uid']}:{PE_SPEC['uid']}"
    assert f"--uid {PE_SPEC['uid']}" in " ".join(pe_instr("RUN"))
    assert pe_instr("WORKDIR")[-1] == PE_CONFIG["WorkingDir"]
    m = re.match(r"python:(\d+\.\d+)(?:\.\d+)?-slim-(\w+)", dockerfile(PE_DOCKERFILE)[0][1])
    assert m and (m.group(1), m.group(2)) == (PE_SPEC["python"], PE_SPEC["distribution"])
    pinned = sorted(w for a in pe_instr("RUN") if "pip install" in a for w in shlex.split(a) if "==" in w)
    assert pinned == sorted(PE_SPEC["requirements"])
    env = dict(kv.split("=", 1) for a in pe_instr("ENV") for kv in shlex.split(a))
    assert env == PE_SPEC["env"]
    assert sorted(int(p) for a in pe_instr("EXPOSE") for p in a.split()) == sorted(PE_SPEC["ports"])
    assert dict(kv.split("=", 1) for a in pe_instr("LABEL") for kv in shlex.split(a)) == PE_CONFIG["Labels"]


def test_pe_examples_image_copies_what_the_dockerfile_copies() -> None:
    """Every COPY of examples/pe/Dockerfile lands where PE_EXAMPLES_IMAGE puts it (WORKDIR /app)."""
    copied: dict[str, str] = {}
    for line in pe_instr("COPY"):
        *srcs, dst = line.split()
        dst = dst if dst.startswith("/") else PE_CONFIG["WorkingDir"] + "/" + dst.removeprefix("./")
        for src in srcs:
            copied[src] = dst.rstrip("/") + "/" + Path(src).name if dst.endswith("/") else dst
    assert copied == PE_SPEC["files"]
    assert all((REPO / src).exists() for src in PE_SPEC["files"])
    # the SDK needs nothing beyond the standard library and the pinned requirements
    sdk_deps = {r.split("==")[0].replace("-", "_") for r in PE_SPEC["requirements"]}
    assert sdk_deps == {"prometheus_client"}
