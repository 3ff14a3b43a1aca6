#!/usr/bin/env python3
"""Build a release a platform can consume (issue 48 item 1), without Docker or a registry.

    hack/release.py [--version V] [--out dist] [--check-reproducible]
    make release [VERSION=V]

Writes into ``--out`` (default ``dist/``), for version V (default: pyproject.toml's):

- ``kubesoda-image-V.oci.tar``: the operator/extender image ``ghcr.io/kubesoda/kubesoda:V`` as an OCI
  image layout archive (hack/build-image.py), which ``skopeo copy oci-archive:...``, ``ctr images
  import`` and ``crane push`` take; ``kubesoda-image-V.digest`` its manifest digest;
- ``kubesoda-V.tgz``: the Helm chart, version and appVersion V, so its default ``image.tag`` is V;
- ``kubesoda-crds-V.yaml``: the CRDs, for ``kubectl apply --server-side`` before an upgrade (Helm
  never upgrades ``crds/``);
- ``kubesoda-image-V.cdx.json``: a CycloneDX 1.5 SBOM of the image, read from the archive itself
  (every Debian package of the base layer from dpkg's status file, every Python distribution of the
  application layer from its ``.dist-info/METADATA``), so it lists what ships, not what was asked for;
- ``SHA256SUMS``: the SHA-256 of each of the above (``sha256sum -c SHA256SUMS``).

Reproducible: ``SOURCE_DATE_EPOCH`` is the commit's time (``git log -1 --format=%ct``), which fixes
every mtime in the layers and the image's ``created``; pip compiles bytecode with hashes, not mtimes,
under it (PEP 552), and the wheel's temporary path is not recorded. Built twice from the same commit
with the same base layer (cached under ~/.cache/kubesoda/images) and the same resolved dependencies,
the digest is the same: ``--check-reproducible`` rebuilds once more and compares. Dependencies are
not pinned by the project; the SBOM records the versions that were resolved.

docs/install.md ("Installing from a release") says how to push the image to a registry and install,
upgrade and uninstall the chart; e2e/test_chart_realnode.py installs exactly these artifacts.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import uuid
from email.parser import HeaderParser
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
REPOSITORY = "ghcr.io/kubesoda/kubesoda"


def log(msg: str) -> None:
    print(f"[release] {msg}", file=sys.stderr, flush=True)


def _builder():
    """hack/build-image.py as a module (its name has a dash)."""
    spec = importlib.util.spec_from_file_location("build_image", HERE / "build-image.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def project_version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def source_date_epoch() -> str:
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return os.environ["SOURCE_DATE_EPOCH"]
    proc = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%ct"], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        sys.exit("release: not a git checkout and SOURCE_DATE_EPOCH unset: set it to the release's time (seconds)")
    return proc.stdout.strip()


def archive_digest(archive: Path) -> str:
    """The manifest digest an OCI layout archive's index names (what a registry will serve)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        index = json.load(member)
    return str(index["manifests"][0]["digest"])


def _purl_pypi(name: str, version: str) -> str:
    return f"pkg:pypi/{name.lower().replace('_', '-')}@{version}"


def image_components(archive: Path) -> list[dict]:
    """Every Debian package and Python distribution in the image's layers (CycloneDX components)."""
    found: dict[str, dict] = {}
    with tarfile.open(archive) as outer:
        index = json.load(outer.extractfile("index.json"))  # type: ignore[arg-type]
        manifest = json.load(outer.extractfile(f"blobs/sha256/{index['manifests'][0]['digest'][7:]}"))  # type: ignore[arg-type]
        for layer in manifest["layers"]:
            blob = outer.extractfile(f"blobs/sha256/{layer['digest'][7:]}")
            assert blob is not None
            with tarfile.open(fileobj=blob, mode="r|") as tar:  # a stream: layers are large
                for m in tar:
                    name = m.name.lstrip("./")
                    if name == "var/lib/dpkg/status" and m.isfile():
                        for pkg in _dpkg_status(tar.extractfile(m).read().decode()):  # type: ignore[union-attr]
                            found[pkg["purl"]] = pkg
                    elif name.endswith(".dist-info/METADATA") and m.isfile():
                        meta = HeaderParser().parsestr(tar.extractfile(m).read().decode(errors="replace"))  # type: ignore[union-attr]
                        comp = {"type": "library", "name": meta["Name"], "version": meta["Version"],
                                "purl": _purl_pypi(meta["Name"], meta["Version"])}
                        lic = meta.get("License-Expression") or (meta.get("License") or "").strip()
                        if lic and len(lic) < 100 and "\n" not in lic:
                            key = "expression" if meta.get("License-Expression") else "license"
                            comp["licenses"] = [{"expression": lic}] if key == "expression" else [{"license": {"name": lic}}]
                        found[comp["purl"]] = comp
    return sorted(found.values(), key=lambda c: c["purl"])


def _dpkg_status(text: str) -> list[dict]:
    out = []
    for para in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in para.splitlines() if ": " in line and not line.startswith(" "))
        if "Package" not in fields or "install ok installed" not in fields.get("Status", ""):
            continue
        arch = fields.get("Architecture", "all")
        out.append({"type": "library", "name": fields["Package"], "version": fields["Version"],
                    "purl": f"pkg:deb/debian/{fields['Package']}@{fields['Version']}?arch={arch}&distro=debian-12"})
    return out


def sbom(archive: Path, version: str, digest: str, epoch: str) -> dict:
    """A CycloneDX 1.5 JSON document for the image (deterministic: its serial number derives from the digest)."""
    import time

    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'{REPOSITORY}@{digest}')}",
        "version": 1,
        "metadata": {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(epoch))),
            "tools": {"components": [{"type": "application", "name": "kubesoda hack/release.py"}]},
            "component": {"type": "container", "name": REPOSITORY, "version": version,
                          "purl": f"pkg:oci/kubesoda@{digest.replace(':', '%3A')}?repository_url={REPOSITORY}&tag={version}"},
        },
        "components": image_components(archive),
    }


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default=project_version())
    ap.add_argument("--out", type=Path, default=REPO / "dist")
    ap.add_argument("--check-reproducible", action="store_true", help="build the image twice and compare digests")
    args = ap.parse_args()
    version, out = args.version, args.out.resolve()
    os.environ["SOURCE_DATE_EPOCH"] = epoch = source_date_epoch()
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("kubesoda-*"), out / "SHA256SUMS"]:  # an earlier release's files only, never others in --out
        if old.is_file():
            old.unlink()
    ref = f"{REPOSITORY}:{version}"
    builder = _builder()
    log(f"image {ref} (SOURCE_DATE_EPOCH={epoch})")
    built = builder.build_image(ref, force=args.check_reproducible)
    image = out / f"kubesoda-image-{version}.oci.tar"
    shutil.copyfile(built, image)
    digest = archive_digest(image)
    if args.check_reproducible:
        again = archive_digest(builder.build_image(ref, force=True))
        if again != digest:
            log(f"NOT reproducible: {digest} then {again}")
            return 1
        log(f"reproducible: {digest} twice")
    (out / f"kubesoda-image-{version}.digest").write_text(digest + "\n")
    log(f"chart kubesoda-{version}.tgz (appVersion {version}: image.tag defaults to it)")
    subprocess.run([str(HERE / "helm.sh"), "package", str(REPO / "charts" / "kubesoda"), "--version", version,
                    "--app-version", version, "-d", str(out)], check=True, stdout=subprocess.DEVNULL)
    crds = sorted((REPO / "crds").glob("*.yaml"))
    (out / f"kubesoda-crds-{version}.yaml").write_text(
        "".join(("---\n" if i else "") + p.read_text().removeprefix("---\n") for i, p in enumerate(crds)))
    log("SBOM (CycloneDX 1.5) from the archive's layers")
    (out / f"kubesoda-image-{version}.cdx.json").write_text(json.dumps(sbom(image, version, digest, epoch), indent=1) + "\n")
    files = sorted(p for p in out.iterdir() if p.is_file() and p.name != "SHA256SUMS")
    (out / "SHA256SUMS").write_text("".join(f"{sha256(p)}  {p.name}\n" for p in files))
    for p in [*files, out / "SHA256SUMS"]:
        log(f"  {p.relative_to(out.parent) if out.parent in p.parents else p}  {p.stat().st_size >> 10} KiB")
    print(json.dumps({"version": version, "image": ref, "digest": digest, "dir": str(out),
                      "files": [p.name for p in files]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
