"""hack/release.py and the reproducible parts of hack/build-image.py (issue 48 item 1): the same files
under the same SOURCE_DATE_EPOCH give the same bytes and the same digest, and the SBOM lists what the
image's layers hold. The whole release is built and installed on a real node by
e2e/test_chart_realnode.py; this checks the pieces in seconds."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sys
import tarfile
import time
from pathlib import Path

import pytest

HACK = Path(__file__).resolve().parent.parent / "hack"
sys.path.insert(0, str(HACK))
import oci_image  # noqa: E402


def _load(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, HACK / file)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


builder = _load("build_image", "build-image.py")
release = _load("release", "release.py")


def _tree(root: Path, mtime: float) -> Path:
    (root / "usr" / "lib").mkdir(parents=True)
    (root / "usr" / "lib" / "a.py").write_text("x = 1\n")
    (root / "usr" / "lib" / "b.txt").write_text("b\n")
    for p in root.rglob("*"):
        os.utime(p, (mtime, mtime))
    return root


def test_a_layer_is_the_same_bytes_whenever_its_files_were_written(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    layers = []
    for i, when in enumerate((time.time(), time.time() - 86400)):
        src = _tree(tmp_path / f"src{i}", when)
        builder.tar_dir(src, tmp_path / f"l{i}.tar", root_owned=True)
        layers.append((tmp_path / f"l{i}.tar").read_bytes())
    assert layers[0] == layers[1]
    with tarfile.open(tmp_path / "l0.tar") as tar:
        assert {m.mtime for m in tar.getmembers()} == {1700000000}


def test_an_archive_has_the_same_digest_when_written_again_later(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    layer = tmp_path / "layer.tar"
    builder.tar_dir(_tree(tmp_path / "src", time.time()), layer, root_owned=True)
    digests, blobs = [], []
    for i in range(2):
        out = tmp_path / f"img{i}.oci.tar"
        digests.append(oci_image.write_archive(out, [layer], oci_image.kubesoda_config(), "ghcr.io/x/y:1.0"))
        blobs.append(out.read_bytes())
        os.utime(layer, (time.time() + 5, time.time() + 5))  # touched between the two writes
        time.sleep(1.1)  # the clock moves on: "created" must not
    assert digests[0] == digests[1] and blobs[0] == blobs[1]
    assert release.archive_digest(tmp_path / "img0.oci.tar") == digests[0]
    with tarfile.open(tmp_path / "img0.oci.tar") as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        manifest = json.load(tar.extractfile(f"blobs/sha256/{index['manifests'][0]['digest'][7:]}"))  # type: ignore[arg-type]
        config = json.load(tar.extractfile(f"blobs/sha256/{manifest['config']['digest'][7:]}"))  # type: ignore[arg-type]
    assert config["created"] == "2023-11-14T22:13:20Z"


def test_the_wheels_temporary_path_is_not_recorded(tmp_path):
    info = tmp_path / "kubesoda-0.1.0.dist-info"
    info.mkdir()
    (info / "direct_url.json").write_text('{"url": "file:///tmp/kubesoda-image-x1y2/wheels/kubesoda.whl"}')
    (info / "RECORD").write_text("kubesoda/__init__.py,sha256=abc,10\nkubesoda-0.1.0.dist-info/direct_url.json,,\n")
    builder._drop_direct_url(tmp_path, "kubesoda")
    assert not (info / "direct_url.json").exists()
    assert (info / "RECORD").read_text() == "kubesoda/__init__.py,sha256=abc,10\n"


def _layer_with(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


DPKG = """Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9+deb12u4

Package: removed-one
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: python3.11
Status: install ok installed
Architecture: amd64
Version: 3.11.2-6
Description: an interactive language
 with a continuation line: not a field
"""

METADATA = "Metadata-Version: 2.4\nName: Kopf\nVersion: 1.45.2\nLicense-Expression: MIT\n\nlong description\n"


def test_the_sbom_lists_every_installed_package_of_every_layer(tmp_path, monkeypatch):
    base, app = tmp_path / "base.tar", tmp_path / "app.tar"
    base.write_bytes(_layer_with({"./var/lib/dpkg/status": DPKG, "./etc/passwd": "root:x:0:0::/root:/bin/sh\n"}))
    app.write_bytes(_layer_with({"./usr/local/lib/python3.11/dist-packages/kopf-1.45.2.dist-info/METADATA": METADATA,
                                 "./usr/local/lib/python3.11/dist-packages/kopf/__init__.py": ""}))
    archive = tmp_path / "img.oci.tar"
    digest = oci_image.write_archive(archive, [base, app], oci_image.kubesoda_config(), "ghcr.io/kubesoda/kubesoda:9.9.9")
    doc = release.sbom(archive, "9.9.9", digest, "1700000000")
    purls = [c["purl"] for c in doc["components"]]
    assert purls == ["pkg:deb/debian/libc6@2.36-9+deb12u4?arch=amd64&distro=debian-12",
                     "pkg:deb/debian/python3.11@3.11.2-6?arch=amd64&distro=debian-12",
                     "pkg:pypi/kopf@1.45.2"]
    kopf = doc["components"][-1]
    assert kopf["licenses"] == [{"expression": "MIT"}] and kopf["version"] == "1.45.2"
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.5"
    assert digest.replace(":", "%3A") in doc["metadata"]["component"]["purl"]
    assert doc == release.sbom(archive, "9.9.9", digest, "1700000000")  # deterministic, serial number included


@pytest.mark.parametrize("epoch", ["", "1700000000"])
def test_the_source_date_epoch_is_the_environments_or_the_commits(monkeypatch, epoch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
    got = release.source_date_epoch()
    assert got == epoch if epoch else got.isdigit() and int(got) > 1.6e9


def _render(*values: str) -> list[dict]:
    import subprocess

    import yaml

    root = HACK.parent
    args = [a for v in values for a in ("--set-json", v)]
    out = subprocess.run([str(HACK / "helm.sh"), "template", "r", str(root / "charts" / "kubesoda"), "-n", "ops",
                          "--kube-version", "1.35.8", *args], capture_output=True, text=True, check=True, timeout=300).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_the_charts_scheduler_image_is_the_one_hack_builds():
    import yaml

    values = yaml.safe_load((HACK.parent / "charts" / "kubesoda" / "values.yaml").read_text())
    assert builder.SCHEDULER_REF == values["scheduler"]["image"]
    versions = dict(line.split("=", 1) for line in (HACK / "versions.env").read_text().splitlines() if "=" in line and not line.startswith("#"))
    assert values["scheduler"]["image"].endswith(":" + versions["K8S_VERSION"])


def test_pe_pods_name_the_charts_scheduler_and_it_reaches_the_api_server_like_the_operator():
    docs = _render('scheduler={"name":"soda-two","hostNetwork":true,"nodeSelector":{"type":"real"},"extenderHost":"127.0.0.1","securePort":20123}',
                   'apiServerOverride={"host":"127.0.0.1","port":6443}', 'extender={"tls":{"enabled":true}}')
    op = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "r-operator")
    env = {e["name"]: e.get("value") for e in op["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["KUBESODA_SCHEDULER_NAME"] == "soda-two"
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "r-scheduler")
    import yaml

    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert [p["schedulerName"] for p in config["profiles"]] == ["soda-two"]
    assert config["extenders"][0]["urlPrefix"].startswith("https://127.0.0.1:")
    sched = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "r-scheduler")["spec"]["template"]["spec"]
    assert sched["hostNetwork"] is True and sched["nodeSelector"] == {"type": "real"}
    c = sched["containers"][0]
    assert {e["name"]: e["value"] for e in c["env"]} == {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
    assert "--secure-port=20123" in c["command"] and c["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_the_operator_reads_its_schedulers_name(monkeypatch):
    import subprocess

    code = "from soda_operator.soda import apply; print(apply.SCHEDULER)"
    for env, want in (({"KUBESODA_SCHEDULER_NAME": "soda-two"}, "soda-two"), ({}, "kubesoda")):
        e = {k: v for k, v in os.environ.items() if k != "KUBESODA_SCHEDULER_NAME"} | env
        assert subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, check=True).stdout.strip() == want


def test_the_schedulers_lease_is_the_charts_so_uninstall_removes_it():
    docs = _render()
    lease = [d for d in docs if d["kind"] == "Lease"]
    assert [d["metadata"]["name"] for d in lease] == ["r-scheduler"] and lease[0]["metadata"]["namespace"] == "ops"
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "r-scheduler")
    import yaml

    assert yaml.safe_load(cm["data"]["config.yaml"])["leaderElection"]["resourceName"] == "r-scheduler"
