"""Fixtures for the end-to-end suite: any cluster that KUBECONFIG names.

`make e2e` runs this suite through hack/with-cluster.sh, which starts the local control plane
when KUBECONFIG is unset (and exports KUBECONFIG, KUBESODA_EXTENDER_PORT). Against kind or a
real cluster, set KUBECONFIG yourself.

Fixtures:
- ``kube``: a :class:`Kube` with ``core`` (CoreV1Api), ``apps``, ``custom``
  (CustomObjectsApi), ``apiext`` (ApiextensionsV1Api), ``rbac``, ``api_client``.
- ``namespace``: a fresh namespace per test, deleted afterwards.
- ``kubectl(*args, check=True, input=None)``: runs kubectl with the same kubeconfig and
  returns the CompletedProcess (text).
- ``wait_for(predicate, timeout=60, interval=0.5, what="...")``: polls until truthy, returns the
  value, fails the test with ``what`` on timeout.
- ``extender_port``: the port the local kube-scheduler's kubesoda profile calls.
- ``operator``: ``kubesoda run`` for one test module (CRDs and the fast policy installed first),
  with the module's ``OPERATOR_ARGS`` (extra flags) and its log at ``OPERATOR_LOG`` (else a
  temporary file); a module that needs more (an environment, a policy) defines its own.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

ROOT = Path(__file__).resolve().parent.parent
LANE_BASES = os.environ.get("KUBESODA_E2E_LANE_BASES", "27100,27600,28100,28600")


def _lane(config: pytest.Config) -> tuple[str, int] | None:
    """This xdist worker's lane (its name and port base) when the suite runs in lanes (``make e2e``
    without KUBECONFIG: ``pytest -n N --dist loadfile``), each lane on a local control plane of its
    own; None in a plain run or in xdist's controller."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or not os.environ.get("KUBESODA_E2E_LANES"):
        return None
    index = int(worker.removeprefix("gw"))
    bases = [int(b) for b in LANE_BASES.split(",")]
    if index >= len(bases):
        raise pytest.UsageError(f"e2e lane {worker}: KUBESODA_E2E_LANE_BASES names only {len(bases)} port bases")
    return worker, bases[index]


def pytest_configure(config: pytest.Config) -> None:
    """A lane starts its own cluster (hack/cluster-up.sh) before collection, since some modules read
    the cluster's environment when imported, and exports what hack/with-cluster.sh would."""
    lane = _lane(config)
    if lane is None:
        return
    worker, base = lane
    state = ROOT / ".local" / f"cluster-e2e-{worker}"
    env = {**os.environ, "KUBESODA_STATE": str(state), "KUBESODA_PORT_BASE": str(base)}
    env.pop("KUBECONFIG", None)
    up = subprocess.run([str(ROOT / "hack/cluster-up.sh"), os.environ.get("KUBESODA_TOPOLOGY", str(ROOT / "hack/topologies/small.yaml"))],
                        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    config._kubesoda_lane_state = state  # type: ignore[attr-defined]
    if up.returncode != 0:
        raise pytest.UsageError(f"e2e lane {worker}: hack/cluster-up.sh failed (port base {base}):\n{up.stdout[-4000:]}")
    os.environ.update({"KUBESODA_STATE": str(state), "KUBESODA_PORT_BASE": str(base)})
    for line in (state / "env").read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line.removeprefix("export ").partition("=")
            os.environ[key] = value
    # the kubernetes client read KUBECONFIG when it was imported (conftest imports it): code under
    # test that calls load_kube_config() without a file must find this lane's
    from kubernetes.config import kube_config

    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = os.environ["KUBECONFIG"]
    os.environ.setdefault("KUBESODA_OPERATOR_LOG", f"/tmp/kubesoda-e2e-operator-{worker}.log")
    os.environ.setdefault("KUBESODA_SIMULATOR_LOG", f"/tmp/kubesoda-e2e-simulate-{worker}.log")


def _cluster_down(state: Path) -> None:
    if (state / "env").exists():
        subprocess.run([str(ROOT / "hack/cluster-down.sh")], env={**os.environ, "KUBESODA_STATE": str(state)}, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, check=False, timeout=120)


def pytest_unconfigure(config: pytest.Config) -> None:
    """A lane stops its cluster; xdist's controller then stops every lane's again (cluster-down.sh
    is idempotent), since a worker can be ended before its own unconfigure has run."""
    state = getattr(config, "_kubesoda_lane_state", None)
    if state is not None:
        _cluster_down(state)
    elif os.environ.get("KUBESODA_E2E_LANES") and not os.environ.get("PYTEST_XDIST_WORKER"):
        for index in range(int(getattr(config.option, "numprocesses", 0) or 0)):
            _cluster_down(ROOT / ".local" / f"cluster-e2e-gw{index}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.e2e)


@dataclass
class Kube:
    api_client: client.ApiClient
    core: client.CoreV1Api
    apps: client.AppsV1Api
    custom: client.CustomObjectsApi
    apiext: client.ApiextensionsV1Api
    rbac: client.RbacAuthorizationV1Api


@pytest.fixture(scope="session")
def kube() -> Kube:
    if not os.environ.get("KUBECONFIG"):
        pytest.fail("KUBECONFIG is not set: run the suite with `make e2e` (hack/with-cluster.sh)")
    config.load_kube_config(config_file=os.environ["KUBECONFIG"])  # read now: a lane sets it after kubernetes was imported
    api = client.ApiClient()
    return Kube(
        api_client=api,
        core=client.CoreV1Api(api),
        apps=client.AppsV1Api(api),
        custom=client.CustomObjectsApi(api),
        apiext=client.ApiextensionsV1Api(api),
        rbac=client.RbacAuthorizationV1Api(api),
    )


FINALIZED = ("yieldgroups", "batchdispatches", "flowpools", "jobflows")


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        # the jobs first (no finalizers: gone at once from every operator's view), then the
        # namespace; wait for it, so the next test's operator never plans for a dying namespace
        try:
            kube.custom.delete_collection_namespaced_custom_object("kubesoda.io", "v1alpha1", name, "streamjobs")
        except client.exceptions.ApiException:
            pass
        # Kopf's finalizers on objects with timers outlive an operator the test already stopped, and
        # would hold the namespace in Terminating for the whole wait below
        for plural in FINALIZED:
            try:
                for obj in kube.custom.list_namespaced_custom_object("kubesoda.io", "v1alpha1", name, plural)["items"]:
                    if obj["metadata"].get("finalizers"):
                        kube.custom.patch_namespaced_custom_object("kubesoda.io", "v1alpha1", name, plural, obj["metadata"]["name"],
                                                                   {"metadata": {"finalizers": None}})
            except client.exceptions.ApiException:
                pass
        kube.core.delete_namespace(name, grace_period_seconds=0)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                kube.core.read_namespace(name)
            except client.exceptions.ApiException as e:
                if e.status == 404:
                    break
            time.sleep(1)


def _kubectl(*args: str, check: bool = True, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def kubectl() -> Callable[..., subprocess.CompletedProcess[str]]:
    return _kubectl


def _wait_for(predicate: Callable[[], Any], timeout: float = 60, interval: float = 0.5, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what} (last value: {last!r})")


@pytest.fixture(scope="session")
def wait_for() -> Callable[..., Any]:
    return _wait_for


@pytest.fixture(scope="session")
def extender_port() -> int:
    return int(os.environ.get("KUBESODA_EXTENDER_PORT", "27006"))


@pytest.fixture(scope="module")
def operator(request: pytest.FixtureRequest, kubectl: Any, extender_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from live import start_operator

    log = getattr(request.module, "OPERATOR_LOG", None) or str(tmp_path_factory.mktemp("op") / "operator.log")
    open(log, "w").close()
    proc = start_operator(kubectl, extender_port, log=log, extra=tuple(getattr(request.module, "OPERATOR_ARGS", ())))
    yield proc
    proc.stop()
