"""This checkout against a baseline commit, side by side in one run: the baseline checked out into a
temporary git worktree, and each measurement in a process of its own with that tree's optimizer first
on the path (used by bench_resolution.py and bench_macro_epoch.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def baseline_tree(rev: str, *files: Path) -> Iterator[Path]:
    """A worktree of ``rev`` that runs this checkout's benchmark ``files`` (and this module) with its own code."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(base), rev], check=True)
        try:
            for f in (*files, Path(__file__)):
                (base / "benchmarks" / f.name).write_text(f.read_text())
            yield base
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)


def child(root: Path, module: str, call: str, timeout: float = 900) -> dict:
    """``module.call`` (a Python expression, e.g. ``run_case({...})``) in a process of its own on the
    tree ``root``; its last line of output, as JSON."""
    code = ("import json, sys; sys.path[:0] = [sys.argv[1] + '/optimizer', sys.argv[1]]; sys.argv = sys.argv[:1]; "
            f"import {module} as m; print(json.dumps(m.{call}))")
    env = {"PYTHONPATH": f"{root}/optimizer:{root}", "PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    p = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, env=env, cwd=root, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
