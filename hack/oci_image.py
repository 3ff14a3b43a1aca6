"""A minimal OCI image writer and kubesoda's image definition (used by hack/build-image.py).

No Docker: an image here is a list of uncompressed layer tarballs plus a config, written as an OCI
image layout (``oci-layout``, ``index.json``, ``blobs/sha256/...``) inside one tar archive, which
``ctr -n k8s.io images import`` loads into containerd. Only the standard library is used.

``KUBESODA_IMAGE`` is what the image must be: tests/test_image.py checks that the repository's
Dockerfile says the same (entry point, command, user, Python version, installed package, ports,
environment), so the two builds cannot drift apart silently. ``PE_EXAMPLES_IMAGE`` is the same for
the example PEs' image and examples/pe/Dockerfile.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from pathlib import Path

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"

# What kubesoda's image is, whichever way it is built (Dockerfile or hack/build-image.py).
KUBESODA_IMAGE = {
    "distribution": "bookworm",  # Debian release of the base (python:3.11-slim-bookworm in the Dockerfile)
    "python": "3.11",  # bookworm's python3; the Dockerfile's python:3.11.x
    "package": "kubesoda",  # the wheel installed, at pyproject.toml's version
    "uid": 65532,
    "user_name": "kubesoda",
    "entrypoint": ["kubesoda"],
    "cmd": ["run"],
    "env": {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"},
    "ports": [8888, 8080],
    "labels": {
        "org.opencontainers.image.source": "https://github.com/kubesoda/kubesoda",
        "org.opencontainers.image.description": "SODA scheduler for stream processing on Kubernetes",
    },
}
# What the example PEs' image is (examples/pe/Dockerfile, or `hack/build-image.py pe-examples`): the
# PE SDK (pe/kubesoda_pe, standard library + prometheus_client) and examples/pe's scripts, nothing
# else of kubesoda.
PE_EXAMPLES_IMAGE = {
    "distribution": "bookworm",
    "python": "3.11",
    "requirements": ["prometheus-client==0.26.0"],  # the Dockerfile's pip install, pinned the same
    "uid": 65532,
    "user_name": "pe",
    "entrypoint": ["python", "/app/examples/run.py"],
    "cmd": [],
    "env": {"PYTHONPATH": "/app/pe", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"},
    "ports": [9000, 9100],
    "workdir": "/app",
    # where each file of the repository goes in the image (the Dockerfile's COPY lines)
    "files": {"pe/kubesoda_pe": "/app/pe/kubesoda_pe", "examples/pe/run.py": "/app/examples/run.py",
              "examples/pe/source.py": "/app/examples/source.py",
              "examples/pe/transform.py": "/app/examples/transform.py", "examples/pe/sink.py": "/app/examples/sink.py"},
    "labels": {
        "org.opencontainers.image.source": "https://github.com/kubesoda/kubesoda",
        "org.opencontainers.image.description": "kubesoda example PEs (source, transform, sink) on the PE SDK",
    },
}
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def kubesoda_config(spec: dict = KUBESODA_IMAGE) -> dict:
    """The OCI ``config`` section (what runs and as whom) of kubesoda's image, or of ``spec``'s."""
    uid = spec["uid"]
    config = {
        "User": f"{uid}:{uid}",
        "Entrypoint": list(spec["entrypoint"]),
        "Cmd": list(spec["cmd"]),
        "Env": [f"PATH={PATH}"] + [f"{k}={v}" for k, v in spec["env"].items()],
        "ExposedPorts": {f"{p}/tcp": {} for p in spec["ports"]},
        "WorkingDir": spec.get("workdir", "/"),
        "Labels": dict(spec["labels"]),
    }
    if not config["Cmd"]:
        del config["Cmd"]
    return config


def _sha256_file(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return "sha256:" + h.hexdigest(), size


def _blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def write_archive(out: Path, layers: list[Path], config: dict, ref: str, history: list[str] | None = None) -> str:
    """Write an OCI layout archive of ``layers`` (uncompressed tars, bottom first) with image
    ``config`` (the OCI ``config`` section) named ``ref`` (``repo:tag``). Returns the manifest digest."""
    layer_descs = []
    for path in layers:
        digest, size = _sha256_file(path)
        layer_descs.append({"mediaType": OCI_LAYER, "digest": digest, "size": size, "path": path})
    epoch = os.environ.get("SOURCE_DATE_EPOCH")  # reproducible builds: the commit's time, not now
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(epoch) if epoch else None))
    image_config = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in layer_descs]},
        "history": [{"created": created, "created_by": h} for h in (history or ["kubesoda hack/build-image.py"] * len(layers))],
    }
    cfg_digest, cfg_bytes = _blob(json.dumps(image_config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": cfg_digest, "size": len(cfg_bytes)},
        "layers": [{k: d[k] for k in ("mediaType", "digest", "size")} for d in layer_descs],
    }
    man_digest, man_bytes = _blob(json.dumps(manifest, sort_keys=True).encode())
    tag = ref.rsplit(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": OCI_MANIFEST,
                "digest": man_digest,
                "size": len(man_bytes),
                "annotations": {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag},
            }
        ],
    }
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:

        def add_bytes(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))

        add_bytes("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add_bytes("index.json", json.dumps(index, sort_keys=True).encode())
        add_bytes(f"blobs/sha256/{cfg_digest[7:]}", cfg_bytes)
        add_bytes(f"blobs/sha256/{man_digest[7:]}", man_bytes)
        seen = set()
        for d in layer_descs:
            if d["digest"] in seen:
                continue
            seen.add(d["digest"])
            info = tar.gettarinfo(str(d["path"]), arcname=f"blobs/sha256/{d['digest'][7:]}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = int(epoch) if epoch else info.mtime
            with open(d["path"], "rb") as f:
                tar.addfile(info, f)
    tmp.replace(out)
    return man_digest
