#!/usr/bin/env python3
"""Build container images without Docker, as OCI archives, and load them into the real nodes.

    hack/build-image.py [kubesoda] [--ref ghcr.io/kubesoda/kubesoda:dev] [--no-load] [--force]
    hack/build-image.py pe-examples [--ref ghcr.io/kubesoda/pe-examples:dev] [--no-load] [--force]
    hack/build-image.py pause --out FILE [--ref localhost/kubesoda/pause:3.10.1]
    hack/build-image.py kube-scheduler [--ref registry.k8s.io/kube-scheduler:v1.35.8] [--no-load]
    hack/build-image.py load ARCHIVE...          # into every real node of $KUBESODA_STATE

kubesoda: two layers. The base is ``debootstrap --variant=minbase --include=python3 bookworm``
(cached under ~/.cache/kubesoda/images/, docs and apt lists removed); the second holds the project
wheel (``pip wheel --no-deps .``) and its dependencies, installed by the host's pip with
``--target /usr/local/lib/python3.11/dist-packages`` for CPython 3.11 on manylinux x86_64 (binary
wheels only, so nothing is compiled against the host), the ``kubesoda`` console script with its
shebang set to the image's /usr/bin/python3, and /etc/passwd and /etc/group with user kubesoda
(65532). Entry point, user, ports and environment come from hack/oci_image.py, which
tests/test_image.py checks against the Dockerfile. Rebuilding after a code change redoes only the
second layer (about 40 s, most of it pip); with unchanged sources the cached archive is reused.

pe-examples: the example PEs' image (examples/pe/Dockerfile without Docker): the same base layer, and
a second one with prometheus_client (pip, binary wheels), pe/kubesoda_pe under /app/pe and
examples/pe's scripts under /app/examples, user pe (65532), entry point ``python
/app/examples/run.py`` (``python`` links to the image's python3). ``PE_EXAMPLES_IMAGE`` in
hack/oci_image.py says what it is; tests/test_image.py checks examples/pe/Dockerfile against it.

pause: the upstream ``build/pause/linux/pause.c`` from the kubernetes module in the Go module cache
(hack/build-binaries.sh puts it there), compiled with ``cc -static``; containerd's sandbox image.

Loading: ``ctr -n k8s.io images import`` against each ``$KUBESODA_STATE/realnode-*/containerd.sock``.
Needs root (debootstrap, chroot-free but files owned by root) and debootstrap, which it installs
itself when it is missing (``hack/install-node-deps.sh --image``: apt-get).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import oci_image  # noqa: E402

CACHE = Path(os.environ.get("KUBESODA_CACHE", Path.home() / ".cache" / "kubesoda"))
IMAGES = CACHE / "images"
DEFAULT_REF = "ghcr.io/kubesoda/kubesoda:dev"
PE_REF = "ghcr.io/kubesoda/pe-examples:dev"
PAUSE_REF = "localhost/kubesoda/pause:3.10.1"
SCHEDULER_REF = "registry.k8s.io/kube-scheduler:v1.35.8"  # the chart's scheduler.image (tests/test_release.py checks)
MIRROR = os.environ.get("KUBESODA_DEBIAN_MIRROR", "http://deb.debian.org/debian")
PLATFORMS = ["manylinux_2_36_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_5_x86_64", "manylinux1_x86_64", "linux_x86_64"]


def log(msg: str) -> None:
    print(f"[build-image] {msg}", file=sys.stderr, flush=True)


def run(*cmd: str | Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def tar_dir(src: Path, out: Path, root_owned: bool) -> None:
    """A layer tarball of the directory ``src`` (GNU tar: devices, hard links, xattr-free). With
    ``SOURCE_DATE_EPOCH`` set (hack/release.py) every mtime is clamped to it and PAX headers carry
    no access/change times, so the same files give the same bytes (reproducible builds)."""
    owner = ["--owner=0", "--group=0"] if root_owned else []
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    stable = ([f"--mtime=@{epoch}", "--clamp-mtime", "--format=posix",
               "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime"] if epoch else [])
    run("tar", "--numeric-owner", *owner, "--sort=name", *stable, "-C", src, "-cf", out, ".")


# ------------------------------------------------------------------ kubesoda
def base_layer() -> Path:
    """The debootstrapped bookworm + python3 layer, built once and cached."""
    spec = oci_image.KUBESODA_IMAGE
    layer = IMAGES / f"base-{spec['distribution']}-minbase-python3.tar"
    if layer.exists():
        return layer
    if not shutil.which("debootstrap"):
        # a fresh machine: install it as the real nodes' packages are installed (apt, as root)
        log("debootstrap is missing: hack/install-node-deps.sh --image")
        if subprocess.run([str(HERE / "install-node-deps.sh"), "--image"]).returncode != 0 or not shutil.which("debootstrap"):
            sys.exit("debootstrap is missing and hack/install-node-deps.sh --image could not install it (see above)")
    IMAGES.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=IMAGES))
    rootfs = work / "rootfs"
    log(f"debootstrap {spec['distribution']} (minbase + python3) into {rootfs}")
    try:
        run("debootstrap", "--variant=minbase", "--include=python3", spec["distribution"], rootfs, MIRROR,
            stdout=subprocess.DEVNULL)
        py = rootfs / "usr" / "bin" / f"python{spec['python']}"
        if not py.exists():
            sys.exit(f"{py} missing: {spec['distribution']}'s python3 is not {spec['python']} (update KUBESODA_IMAGE)")
        for d in ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "var/cache/apt",
                  "var/lib/apt/lists", "var/log"):
            p = rootfs / d
            if p.exists():
                shutil.rmtree(p)
                p.mkdir(mode=0o755)
        tmp = layer.with_name(layer.name + ".tmp")
        tar_dir(rootfs, tmp, root_owned=False)
        tmp.replace(layer)
    finally:
        _umount_under(rootfs)
        shutil.rmtree(work, ignore_errors=True)
    log(f"base layer {layer} ({layer.stat().st_size >> 20} MiB)")
    return layer


def _umount_under(path: Path) -> None:
    """debootstrap mounts proc/sys in the target; make sure a failed run leaves none behind."""
    p = str(path.resolve())
    with open("/proc/mounts") as f:
        mounts = [line.split()[1] for line in f]
    for m in sorted((m for m in mounts if m == p or m.startswith(p + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", m], check=False)


def _passwd_files(base: Path, stage: Path, spec: dict = oci_image.KUBESODA_IMAGE) -> None:
    uid, name = spec["uid"], spec["user_name"]
    etc = stage / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    for fname, line in (("passwd", f"{name}:x:{uid}:{uid}::/nonexistent:/usr/sbin/nologin\n"),
                        ("group", f"{name}:x:{uid}:\n")):
        member = subprocess.run(["tar", "-xOf", str(base), f"./etc/{fname}"], check=True, capture_output=True).stdout
        text = member.decode()
        if not any(row.split(":")[0] == name for row in text.splitlines()):
            text = text.rstrip("\n") + "\n" + line
        (etc / fname).write_text(text)
        (etc / fname).chmod(0o644)


def source_paths() -> list[str]:
    """pyproject.toml, README.md and the package directories its setuptools section names."""
    import tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    where = meta.get("tool", {}).get("setuptools", {}).get("packages", {}).get("find", {}).get("where", ["."])
    return ["pyproject.toml", "README.md", *where]


def _pip_target(site: Path, python: str, *requirements: str | Path) -> None:
    """Install ``requirements`` into ``site`` for the image's CPython (binary wheels only), then
    compile their bytecode as the image will see it (``_compile``)."""
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    run(sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-warn-script-location",
        "--no-compile", "--target", site, "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
        "--abi", "cp" + python.replace(".", ""), *plat, *requirements)
    _compile(site, f"/usr/local/lib/python{python}/dist-packages")


def _compile(site: Path, image_path: str) -> None:
    """Bytecode for every module under ``site``, compiled by the host's CPython (the image's minor
    version: tests/test_image.py) in a process of its own, with the paths the image has
    (``co_filename`` under ``image_path``, not pip's temporary directory) and hash-based
    invalidation (PEP 552), so the same sources give the same bytes whenever they are built."""
    if sys.version_info[:2] != tuple(int(x) for x in image_path.split("python", 1)[1].split("/")[0].split(".")):
        log("the host's Python is not the image's: no bytecode compiled (the image compiles at import)")
        return
    run(sys.executable, "-m", "compileall", "-q", "-j", "1", "--invalidation-mode", "checked-hash",
        "-s", site, "-p", image_path, site, stdout=subprocess.DEVNULL)


def _drop_direct_url(site: Path, package: str) -> None:
    """pip records where the project's wheel came from (a temporary directory) in
    ``direct_url.json``: drop it and its RECORD line, so the layer does not depend on that path."""
    for info in site.glob(f"{package}-*.dist-info"):
        (info / "direct_url.json").unlink(missing_ok=True)
        record = info / "RECORD"
        if record.exists():
            rows = [r for r in record.read_text().splitlines() if not r.split(",", 1)[0].endswith("/direct_url.json")]
            record.write_text("\n".join(rows) + "\n")


def _finish_layer(stage: Path, out: Path) -> Path:
    """Make everything in ``stage`` world-readable and pack it as a root-owned layer."""
    for d, _, files in os.walk(stage):
        os.chmod(d, 0o755)
        for f in files:
            p = os.path.join(d, f)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | 0o444)
    tar_dir(stage, out, root_owned=True)
    return out


def app_layer(base: Path, work: Path) -> Path:
    spec = oci_image.KUBESODA_IMAGE
    wheels = work / "wheels"
    # built from a copy of what the Dockerfile copies too (pyproject.toml, README.md and the package
    # directories), so that setuptools' in-tree build/ of the checkout neither changes nor leaks in
    src = work / "src"
    src.mkdir()
    for name in source_paths():
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy2(REPO / name, src / name)
    log("pip wheel --no-deps . (the project's wheel)")
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", wheels, src,
        stderr=subprocess.DEVNULL)
    wheel = next(wheels.glob(f"{spec['package']}-*.whl"))
    stage = work / "stage"
    site = stage / "usr" / "local" / "lib" / f"python{spec['python']}" / "dist-packages"
    log(f"pip install {wheel.name} and its dependencies into the image (CPython {spec['python']}, binary wheels)")
    _pip_target(site, spec["python"], f"{wheel}[web]")  # the web view serves plotly.min.js (the web extra)
    _drop_direct_url(site, spec["package"])
    bindir = stage / "usr" / "local" / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for script in (site / "bin").iterdir():
        data = script.read_bytes()
        if data.startswith(b"#!"):
            data = b"#!/usr/bin/python3" + data[data.index(b"\n"):]
        (bindir / script.name).write_bytes(data)
        (bindir / script.name).chmod(0o755)
    shutil.rmtree(site / "bin")
    if not (bindir / spec["entrypoint"][0]).exists():
        sys.exit(f"the wheel installed no {spec['entrypoint'][0]} script")
    _passwd_files(base, stage)
    return _finish_layer(stage, work / "app.tar")


def pe_layer(base: Path, work: Path) -> Path:
    """The example PEs' layer: prometheus_client, the PE SDK and examples/pe's scripts."""
    spec = oci_image.PE_EXAMPLES_IMAGE
    stage = work / "stage"
    site = stage / "usr" / "local" / "lib" / f"python{spec['python']}" / "dist-packages"
    log(f"pip install {' '.join(spec['requirements'])} into the image (CPython {spec['python']}, binary wheels)")
    _pip_target(site, spec["python"], *spec["requirements"])
    shutil.rmtree(site / "bin", ignore_errors=True)
    for src, dst in spec["files"].items():
        target = stage / dst.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / src).is_dir():
            shutil.copytree(REPO / src, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / src, target)
    bindir = stage / "usr" / "local" / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    (bindir / "python").symlink_to("/usr/bin/python3")  # the Dockerfile's entry point says python
    _passwd_files(base, stage, spec)
    return _finish_layer(stage, work / "pe.tar")


def source_key(paths: list[str] | None = None) -> str:
    """A digest of everything the image is made of here: the sources the wheel is built from (or
    ``paths``), this builder and the image definition. Dependencies are not pinned, so --force
    picks up new ones."""
    import hashlib

    h = hashlib.sha256()
    files = [HERE / "build-image.py", HERE / "oci_image.py"]
    for name in (source_paths() if paths is None else paths):
        p = REPO / name
        files += sorted(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts
                        and not f.name.endswith(".pyc") and ".egg-info" not in str(f)) if p.is_dir() else [p]
    for f in files:
        h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def build_image(ref: str, what: str = "kubesoda", force: bool = False) -> Path:
    """kubesoda's image (``what="kubesoda"``) or the example PEs' (``"pe-examples"``) as an OCI
    archive in the cache, rebuilt only when its sources changed."""
    out = IMAGES / (ref.rsplit("/", 1)[-1].replace(":", "-") + ".oci.tar")
    key_file = out.with_name(out.name + ".key")
    if what == "pe-examples":
        spec, make_layer, step = oci_image.PE_EXAMPLES_IMAGE, pe_layer, "the PE SDK and examples/pe"
        key = source_key(sorted({src.split("/")[0] + "/" + src.split("/")[1] for src in spec["files"]}))
    else:
        spec, make_layer, step = oci_image.KUBESODA_IMAGE, app_layer, "pip install kubesoda"
        key = source_key()
    key += os.environ.get("SOURCE_DATE_EPOCH", "")  # a release build is not a dev build of the same files
    if not force and out.exists() and key_file.exists() and key_file.read_text() == key:
        log(f"{ref}: {out} is up to date with the sources")
        return out
    base = base_layer()
    with tempfile.TemporaryDirectory(prefix=f"{what}-image-", dir=IMAGES) as tmp:
        layer = make_layer(base, Path(tmp))
        oci_image.write_archive(out, [base, layer], oci_image.kubesoda_config(spec), ref,
                                history=["debootstrap --variant=minbase --include=python3 bookworm",
                                         f"{step} (hack/build-image.py)"])
    key_file.write_text(key)
    log(f"{ref}: {out} ({out.stat().st_size >> 20} MiB)")
    return out


# ------------------------------------------------------------------ pause
def build_pause(out: Path, ref: str) -> Path:
    versions = dict(line.split("=", 1) for line in (HERE / "versions.env").read_text().splitlines()
                    if "=" in line and not line.startswith("#"))
    modcache = subprocess.run(["go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True).stdout.strip()
    src = Path(modcache) / f"k8s.io/kubernetes@{versions['K8S_VERSION']}" / "build/pause/linux/pause.c"
    if not src.exists():
        sys.exit(f"{src} missing: run hack/build-binaries.sh (it downloads the kubernetes module)")
    tag = ref.rsplit(":", 1)[1]
    with tempfile.TemporaryDirectory(prefix="pause-") as tmp:
        root = Path(tmp) / "rootfs"
        root.mkdir()
        run("cc", "-Os", "-Wall", "-static", f"-DVERSION=v{tag}-kubesoda", "-o", root / "pause", src)
        if shutil.which("strip"):
            subprocess.run(["strip", str(root / "pause")], check=False)
        layer = Path(tmp) / "layer.tar"
        tar_dir(root, layer, root_owned=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        oci_image.write_archive(out, [layer], {"User": "65535:65535", "Entrypoint": ["/pause"], "WorkingDir": "/"},
                                ref, history=[f"cc -static {src.name} (kubernetes {versions['K8S_VERSION']})"])
    return out


# ------------------------------------------------------------------ kube-scheduler
def build_scheduler(out: Path, ref: str) -> Path:
    """The chart's second scheduler image (``scheduler.image``, upstream's
    ``registry.k8s.io/kube-scheduler``) from the pinned kube-scheduler hack/build-binaries.sh built
    from the same Kubernetes module (static, stripped): one layer with /usr/local/bin/kube-scheduler,
    user 65532 like upstream's distroless nonroot. Without a registry, this stands in for the pull a
    cluster makes; the binary is the same version the chart names."""
    versions = dict(line.split("=", 1) for line in (HERE / "versions.env").read_text().splitlines()
                    if "=" in line and not line.startswith("#"))
    found = sorted((CACHE / "bin").glob(f"k8s-{versions['K8S_VERSION']}_*/kube-scheduler"))
    if not found:
        sys.exit(f"no kube-scheduler {versions['K8S_VERSION']} under {CACHE / 'bin'}: run hack/build-binaries.sh")
    if ref.rsplit(":", 1)[-1] != versions["K8S_VERSION"]:
        sys.exit(f"{ref}: the binary is kube-scheduler {versions['K8S_VERSION']}; the tag must say so")
    with tempfile.TemporaryDirectory(prefix="kube-scheduler-") as tmp:
        root = Path(tmp) / "rootfs"
        (root / "usr" / "local" / "bin").mkdir(parents=True)
        shutil.copy2(found[-1], root / "usr" / "local" / "bin" / "kube-scheduler")
        (root / "tmp").mkdir(mode=0o1777)
        layer = Path(tmp) / "layer.tar"
        tar_dir(root, layer, root_owned=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        oci_image.write_archive(out, [layer], {"User": "65532:65532", "Entrypoint": ["/usr/local/bin/kube-scheduler"],
                                               "Env": [f"PATH={oci_image.PATH}"], "WorkingDir": "/"},
                                ref, history=[f"kube-scheduler {versions['K8S_VERSION']} (hack/build-binaries.sh)"])
    return out


# ------------------------------------------------------------------ load
def sockets() -> list[Path]:
    state = os.environ.get("KUBESODA_STATE", str(REPO / ".local" / "cluster"))
    return sorted(Path(state).glob("realnode-*/containerd.sock"))


def load(archives: list[Path]) -> int:
    socks = sockets()
    if not socks:
        log("no real node in $KUBESODA_STATE: nothing loaded")
        return 0
    for sock in socks:
        for a in archives:
            log(f"ctr images import {a.name} -> {sock.parent.name}")
            run("ctr", "--address", sock, "-n", "k8s.io", "images", "import", a,
                stdout=subprocess.DEVNULL)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what")
    k = sub.add_parser("kubesoda", help="kubesoda's image (the default)")
    k.add_argument("--ref", default=DEFAULT_REF)
    k.add_argument("--no-load", action="store_true", help="only write the archive")
    k.add_argument("--force", action="store_true", help="rebuild even when the sources have not changed")
    e = sub.add_parser("pe-examples", help="the example PEs' image (examples/pe)")
    e.add_argument("--ref", default=PE_REF)
    e.add_argument("--no-load", action="store_true", help="only write the archive")
    e.add_argument("--force", action="store_true", help="rebuild even when the sources have not changed")
    p = sub.add_parser("pause", help="the pod sandbox image")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--ref", default=PAUSE_REF)
    ks = sub.add_parser("kube-scheduler", help="the chart's second scheduler from the pinned binary")
    ks.add_argument("--ref", default=SCHEDULER_REF)
    ks.add_argument("--no-load", action="store_true", help="only write the archive")
    ld = sub.add_parser("load", help="import archives into the real nodes' containerd")
    ld.add_argument("archives", type=Path, nargs="+")
    args = ap.parse_args()
    if args.what == "pause":
        print(build_pause(args.out, args.ref))
        return 0
    if args.what == "load":
        return load(args.archives)
    if args.what == "kube-scheduler":
        out = build_scheduler(IMAGES / (args.ref.rsplit("/", 1)[-1].replace(":", "-") + ".oci.tar"), args.ref)
        print(out)
        return 0 if args.no_load else load([out])
    what = args.what or "kubesoda"
    ref = getattr(args, "ref", DEFAULT_REF)
    out = build_image(ref, what, force=getattr(args, "force", False))
    print(out)
    return 0 if getattr(args, "no_load", False) else load([out])


if __name__ == "__main__":
    sys.exit(main())
