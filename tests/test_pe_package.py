"""Packaging (issue 48, item 6): the PE SDK is a distribution of its own, ``kubesoda-pe``
(pe/pyproject.toml), whose code needs the standard library and prometheus_client only; and the
operator's runtime pulls no plotting library (plotly is the ``web`` extra, never imported)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def names(reqs: list[str]) -> set[str]:
    return {Requirement(r).name.lower().replace("_", "-") for r in reqs}


def imported_top_levels(code: str, path: list[Path]) -> set[str]:
    """Top-level modules ``code`` loads in a fresh interpreter whose path is ``path`` plus the venv's
    site-packages (the standard library's and those loaded at start-up left out)."""
    probe = ("import sys\nbefore = set(sys.modules)\n" + code + "\nprint(' '.join(sorted({m.split('.')[0] for m in"
             " set(sys.modules) - before} - set(sys.stdlib_module_names) - set(sys.builtin_module_names))))")
    env = {"PYTHONPATH": ":".join(str(p) for p in path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True, timeout=120)
    return set(out.stdout.split())


def test_the_pe_sdk_is_its_own_distribution_on_prometheus_client_only():
    meta = tomllib.loads((ROOT / "pe" / "pyproject.toml").read_text())
    project = meta["project"]
    assert project["name"] == "kubesoda-pe"
    assert names(project["dependencies"]) == {"prometheus-client"}
    assert meta["tool"]["setuptools"]["packages"]["find"]["include"] == ["kubesoda_pe*"]
    # the version follows the main distribution's
    assert project["version"] == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    # what it declares is what its code needs: importing the SDK (and starting its metrics) loads
    # nothing beyond the standard library, prometheus_client and itself
    loaded = imported_top_levels("import kubesoda_pe, kubesoda_pe.pe, kubesoda_pe.transport, kubesoda_pe.metrics",
                                 [ROOT / "pe"])
    assert loaded <= {"kubesoda_pe", "prometheus_client"}, loaded


def test_the_operator_pulls_no_plotting_library():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = names(project["dependencies"])
    assert not runtime & {"plotly", "pandas", "matplotlib"}, runtime
    assert "plotly" in names(project["optional-dependencies"]["web"])
    # and nothing the operator loads imports them: the runner (every handler), the extender, the
    # web view, the planner end to end (pandas still arrives through OR-Tools' CP-SAT, its own dependency)
    example = str(ROOT / "examples" / "small-pipeline")
    loaded = imported_top_levels(
        "import io, contextlib\n"
        "import soda_operator.runner, soda_operator.web.server\n"
        "from soda_operator import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    cli.main(['plan', '-f', {example!r}, '--json'])",
        [ROOT / "optimizer", ROOT / "operator", ROOT / "pe"])
    assert "soda_optimizer" in loaded and "ortools" in loaded  # the probe did plan
    assert not loaded & {"plotly", "matplotlib"}, loaded & {"plotly", "matplotlib"}
