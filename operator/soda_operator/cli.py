"""The ``kubesoda`` command: ``plan`` (offline), ``explain`` (one job, live or offline), ``run``
(operator + extender), ``extender``, ``simulate`` (the fluid data plane)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from soda_optimizer import guard, steps, systems
from soda_optimizer.model import Policy, Scenario
from soda_optimizer.plan import Plan

if TYPE_CHECKING:  # scipy, through the learner: imported only where functions are chosen
    from soda_optimizer.learn.functions import Choice

from . import manifests
from .soda import crd, state


def _progress(stop: threading.Event, t0: float) -> None:
    while not stop.wait(1.0):
        print(f"\r[kubesoda plan] optimising... {time.monotonic() - t0:.0f}s", end="", file=sys.stderr, flush=True)


def _table(rows: list[list[Any]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*header)] + [fmt.format(*[str(x) for x in r]) for r in rows])


def render(plan: Plan) -> str:
    jobs = [
        [d.job, "yes" if d.admitted else "no", d.template.split("/", 1)[-1] if d.template else "-", d.rank, d.revised_rank,
         f"{d.importance:.2f}", f"{d.mips:.0f}", d.reason if not d.admitted else ""]
        for d in plan.jobs
    ]
    pes = [
        [p.pe, f"{p.goal_mips:.0f}", ",".join(p.candidates) or "-",
         ",".join(f"{n}={f:.3f}" for n, f in sorted(p.fractions.items())) or "-"]
        for p in plan.pes
    ]
    stages = [[s.stage, s.status, f"{s.seconds:.3f}s", "" if s.objective is None else f"{s.objective:.4g}", s.detail] for s in plan.stages]
    out = [
        f"feasible: {'yes' if plan.feasible else 'NO'}    importance: {plan.importance:.3f}" + (f"    ({plan.message})" if plan.message else ""),
        "",
        _table(jobs, ["JOB", "ADMITTED", "TEMPLATE", "RANK", "REVISED", "IMPORTANCE", "MIPS", "REASON"]),
        "",
        _table(pes, ["PE", "GOAL(MIPS)", "CANDIDATES", "FRACTIONS"]) if pes else "(no PE admitted)",
        "",
        _table(stages, ["STAGE", "STATUS", "TIME", "OBJECTIVE", "DETAIL"]),
    ]
    why = [f"  {d.job}: {d.reason}: {d.message}" for d in plan.jobs if not d.admitted and d.message]
    if why:
        out[3:3] = ["rejected:", *why, ""]
    return "\n".join(out)


def non_finite(doc: Any, path: str = "") -> list[str]:
    """The fields of ``doc`` (JSON-like) holding NaN or an infinity, as "path (value)"; each is
    replaced by None in place, so that ``json.dumps(doc, allow_nan=False)`` cannot fail."""
    out: list[str] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        at = f"{path}[{k}]" if isinstance(k, int) else f"{path}.{k}" if path else str(k)
        if isinstance(v, float) and not math.isfinite(v):
            out.append(f"{at} ({v})")
            doc[k] = None
        elif isinstance(v, dict | list):
            out += non_finite(v, at)
    return out


def plan_json(plan: Plan, errors: list[crd.ObjectError]) -> dict[str, Any]:
    """The ``--json`` document (docs/plan-json.md). A number of the plan that is not finite (the
    arithmetic of numbers at the edge of a float's range) is null, with an error naming it."""
    doc = plan.model_dump(mode="json")
    doc["apiVersion"] = "kubesoda.io/plan/v1alpha1"
    doc["errors"] = [str(e) for e in errors] + [
        f"the plan's {f} is not a finite number: a number in the manifests is too large to plan with" for f in non_finite(doc)]
    return doc


def cmd_plan(args: argparse.Namespace) -> int:
    got = _plan_files(args)
    if isinstance(got, int):
        return got
    plan, errors = got
    doc = plan_json(plan, errors)
    unplannable = doc["errors"][len(errors):]  # non-finite numbers of the plan
    for line in unplannable:
        print(f"error: {line}", file=sys.stderr)
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False))
    else:
        print(render(plan))
    if getattr(args, "serve", False):
        from .web import server as web

        return web.serve_offline(args.planned_scenario, plan, args.host, args.port, args.web_allowed_host or ())
    if errors or unplannable:
        return 2
    refused = any(d.reason == "infeasible-required" for d in plan.jobs)
    return 0 if plan.feasible and not refused else 1


def _functions(scen: Scenario, m: manifests.Manifests) -> tuple[dict[str, Choice], list[crd.ObjectError]]:
    """The resource function each PE is planned with, as the operator's macro epoch chooses it
    (soda_operator.soda.learning, docs/learn.md): a pinned ResourceProfile, the declared function when
    the policy says declared ones win, a learned ResourceProfile, the declared one, the policy's
    default per kind. ResourceProfiles come from the files like any other object. They go into the
    pipeline as its first step (``pipeline.run(scen, functions=...)``), as in the operator."""
    from .soda.learning import Learning

    lrn = Learning(None)
    skipped = lrn.read_profiles(m.profiles)
    errors = [crd.ObjectError("ResourceProfile", name, "status", why, m.source.get(f"ResourceProfile/{name}")) for name, why in skipped]
    choices = lrn.choose_all(scen, m.templates, m.policy)
    if m.profiles and not lrn.settings.enabled:
        print(f"warning: {len(m.profiles)} ResourceProfile(s) not used: the SchedulingPolicy's spec.learning.enabled is not true",
              file=sys.stderr)
    return choices, errors


def _plan_files(args: argparse.Namespace) -> tuple[Plan, list[crd.ObjectError]] | int:
    """The plan of the manifests in ``args.file`` (errors printed), or an exit code."""
    try:
        m = manifests.load(args.file)
    except manifests.ManifestError as e:
        for line in e.lines:
            print(f"error: {line}", file=sys.stderr)
        return 2
    nodes = m.nodes[: args.at_nodes] if args.at_nodes is not None else m.nodes
    try:
        foreign = state.foreign_requests(m.pods)
    except (AttributeError, TypeError, ValueError, KeyError) as e:
        print(f"error: a Pod in the given manifests is malformed: {e}", file=sys.stderr)
        return 2
    scen, errors = crd.scenario_from_objects(nodes, m.templates, m.jobs, m.policy, source=m.source, foreign=foreign, validate=True,
                                             now=datetime.now(UTC))
    functions, bad = _functions(scen, m)
    errors += bad
    for err in errors:
        print(f"error: {err}", file=sys.stderr)
    upd: dict[str, Any] = {}
    if args.resolution_units:
        upd.update(resolution_units=args.resolution_units, unit_mips=None)
    if args.unit_mips:
        upd.update(unit_mips=args.unit_mips, resolution_units=None)
    if args.deadline_scale != 1.0:
        p = scen.policy
        for f in ("macroq_deadline_s", "macrow_deadline_s", "microq_deadline_s", "microw_deadline_s"):
            upd[f] = getattr(p, f) * args.deadline_scale
    if upd:
        scen = scen.model_copy(update={"policy": scen.policy.model_copy(update=upd)})
    if not scen.jobs and not errors:
        print("error: no StreamJob in the given manifests", file=sys.stderr)
        return 2
    stop = threading.Event()
    t0 = time.monotonic()
    th = threading.Thread(target=_progress, args=(stop, t0), daemon=True)
    th.start()
    try:
        # the operator's pipeline guard: a job that makes planning fail is left out with an error,
        # the others are planned as without it (soda_optimizer.guard)
        out = guard.run(scen, lambda s: systems.decide("soda", systems.SodaSpec(functions=functions), s).result, fallback=Policy())
    except guard.Unplannable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        stop.set()
        th.join()
        if time.monotonic() - t0 >= 1.0:
            print(f"\r[kubesoda plan] done in {time.monotonic() - t0:.1f}s   ", file=sys.stderr)
    if out.policy_fault:  # the policy, not a job, made planning fail: planned under the defaults
        errors.append(crd.ObjectError("SchedulingPolicy", "default", "", f"planning fails with this policy ({out.policy_fault}); planned with the defaults",
                                      m.source.get("SchedulingPolicy/default"), "PlanningFailed"))
        print(f"error: {errors[-1]}", file=sys.stderr)
        scen = scen.model_copy(update={"policy": Policy()})
    for job, why in out.quarantined.items():
        errors.append(crd.ObjectError("StreamJob", job, "", f"planning failed with this job ({why}); it was left out", m.source.get(f"StreamJob/{job}"),
                                      "Quarantined"))
        print(f"error: {errors[-1]}", file=sys.stderr)
    args.planned_scenario = guard.without(steps.learned(scen, functions), out.quarantined)  # kubesoda plan --serve shows it
    return out.plan, errors


def _ranking(me: dict[str, Any], others: list[dict[str, Any]]) -> str:
    """Where a job stands: the jobs of better and equal revised rank, and how many of them run."""
    better = [o for o in others if o["revised_rank"] < me["revised_rank"]]
    equal = [o for o in others if o["revised_rank"] == me["revised_rank"] and o["job"] != me["job"]]
    return (f"{len(better)} job(s) of better revised rank ({sum(o['admitted'] for o in better)} admitted), "
            f"{len(equal)} of equal revised rank ({sum(o['admitted'] for o in equal)} admitted), "
            f"{len(others) - len(better) - len(equal) - 1} of worse")


def explain_text(me: dict[str, Any], others: list[dict[str, Any]], pes: list[list[str]]) -> str:
    head = f"{me['job']}: {me['state']}" + (f" ({me['reason']})" if me["reason"] and not me["admitted"] else "")
    out = [head]
    if me["message"]:
        out.append(f"  why:        {me['message']}")
    out.append(f"  rank:       {me['rank']} declared, {me['revised_rank']} revised (the best rank of the jobs that import from it)")
    out.append(f"  standing:   {_ranking(me, others)}")
    if me["admitted"]:
        out.append(f"  template:   {me['template']}, importance {me['importance']:.2f}, {me['mips']:.0f} mips")
        if pes:
            out += ["", _table(pes, ["PE", "GOAL(MIPS)", "CANDIDATES", "INSTANCES"])]
    return "\n".join(out)


def cmd_explain(args: argparse.Namespace) -> int:
    want = args.job if "/" in args.job else f"{args.namespace}/{args.job}"
    if args.file:
        got = _plan_files(args)
        if isinstance(got, int):
            return got
        plan, _ = got
        rows = [{"job": d.job, "admitted": d.admitted, "state": "admitted" if d.admitted else "not admitted", "reason": d.reason,
                 "message": d.message, "rank": d.rank, "revised_rank": d.revised_rank,
                 "template": (d.template or "-").split("/", 1)[-1], "importance": d.importance, "mips": d.mips} for d in plan.jobs]
        pes = [[p.name, f"{p.goal_mips:.0f}", ",".join(p.candidates), ",".join(f"{n}={f:.3f}" for n, f in sorted(p.fractions.items()))]
               for p in plan.pes if p.job == want]
    else:
        try:
            rows, pes = _live_rows(want)
        except Exception as e:  # noqa: BLE001 - any API or config problem is one clear line
            print(f"error: cannot read StreamJobs from the cluster: {e}", file=sys.stderr)
            return 2
    me = next((r for r in rows if r["job"] == want), None)
    if me is None:
        print(f"error: no StreamJob {want}" + (" in the given manifests" if args.file else " in the cluster"), file=sys.stderr)
        return 2
    if args.json:
        doc = {**me, "standing": _ranking(me, rows), "pes": pes}
        bad = non_finite(doc)
        for f in bad:
            print(f"error: the plan's {f} is not a finite number: a number in the manifests is too large to plan with", file=sys.stderr)
        print(json.dumps(doc, indent=2, allow_nan=False))
        return 2 if bad else 0
    else:
        print(explain_text(me, rows, pes))
    return 0


def _live_rows(want: str) -> tuple[list[dict[str, Any]], list[list[str]]]:
    from kubernetes import client, config

    config.load_kube_config()
    items = cast(dict[str, Any], client.CustomObjectsApi().list_cluster_custom_object(crd.GROUP, crd.VERSION, "streamjobs"))["items"]
    rows, pes = [], []
    for o in items:
        st, sp, md = o.get("status") or {}, o.get("spec") or {}, o.get("metadata") or {}
        name = f"{md.get('namespace')}/{md.get('name')}"
        phase = st.get("phase") or "Pending"
        rows.append({"job": name, "admitted": phase in ("Admitted", "Running", "Degraded"), "state": phase, "reason": st.get("reason", ""),
                     "message": st.get("message", ""), "rank": sp.get("rank", 1), "revised_rank": st.get("revisedRank", sp.get("rank", 1)),
                     "template": st.get("chosenTemplate", "-"), "importance": st.get("importance", 0.0), "mips": st.get("mips", 0.0)})
        if name == want:
            pes = [[p.get("name", ""), f"{p.get('goalMips', 0):.0f}", ",".join(p.get("candidates") or []),
                    ",".join(f"{i.get('node')}={i.get('fraction', 0):.3f}" if isinstance(i, dict) else str(i) for i in p.get("instances") or [])]
                   for p in st.get("pes") or []]
    return rows, pes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kubesoda", description="SODA stream-processing scheduler for Kubernetes")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="print what the scheduler would do with these manifests (no cluster needed)")
    p.add_argument("-f", "--file", action="append", required=True, help="YAML file or directory (repeatable)")
    p.add_argument("--json", action="store_true", help="one JSON document (schema: docs/plan-json.md)")
    p.add_argument("--at-nodes", type=int, help="use only the first N nodes")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resolution-units", type=int, help="macroQ: fixed number of atomic units")
    g.add_argument("--unit-mips", type=float, help="macroQ: fixed unit size in mips")
    p.add_argument("--deadline-scale", type=float, default=1.0, help="multiply every stage deadline")
    p.add_argument("--serve", action="store_true", help="then show the plan in the web view until interrupted (docs/web.md)")
    p.add_argument("--port", type=int, default=8090, help="web view port (with --serve)")
    p.add_argument("--host", default="127.0.0.1", help="web view address (with --serve)")
    _allowed_host_flag(p, "(with --serve)")
    p.set_defaults(func=cmd_plan)
    x = sub.add_parser("explain", help="why a job is (not) admitted, and where it stands in the ranking (live, or from files with -f)")
    x.add_argument("job", help="NAMESPACE/NAME (or NAME with -n)")
    x.add_argument("-n", "--namespace", default="default")
    x.add_argument("-f", "--file", action="append", help="plan these manifests instead of reading the cluster (repeatable)")
    x.add_argument("--json", action="store_true")
    x.add_argument("--at-nodes", type=int, help=argparse.SUPPRESS)
    x.add_argument("--resolution-units", type=int, help=argparse.SUPPRESS)
    x.add_argument("--unit-mips", type=float, help=argparse.SUPPRESS)
    x.add_argument("--deadline-scale", type=float, default=1.0, help="multiply every stage deadline (with -f)")
    x.set_defaults(func=cmd_explain)
    t = sub.add_parser("top", help="what kubesoda runs, per job (phase, mips, CPU, pods, projected and observed importance) and per node")
    t.add_argument("-n", "--namespace", default="default")
    t.add_argument("-A", "--all-namespaces", action="store_true")
    t.add_argument("--all-nodes", action="store_true", help="also the nodes where kubesoda runs nothing")
    t.add_argument("--no-nodes", action="store_true", help="only the jobs")
    t.set_defaults(func=lambda a: _lazy("soda_operator.top", a))
    r = sub.add_parser("run", help="run the operator and the extender against the current kubeconfig")
    r.add_argument("--extender-port", type=int, default=8888, help="0 to run without the extender")
    r.add_argument("--extender-host", default="127.0.0.1")
    _extender_flags(r, "extender-")
    r.add_argument("--peering", help="leader election among replicas through this Kopf peering name (the CRD is in crds/; "
                   "the peering object is created if missing)")
    r.add_argument("--priority", type=_priority, default=None,
                   help="this replica's peering priority, the highest live one acts; 'auto' (the default) draws a random one")
    r.add_argument("--peering-lifetime", type=int, default=60,
                   help="seconds after which a silent replica (killed, partitioned) is presumed dead and another takes over")
    r.add_argument("--peering-margin", type=float, default=None,
                   help="the leader writes nothing once its last successful renewal is older than the lifetime less this many "
                        "seconds (the fence, issue 46); default a third of the lifetime. Must exceed the longest stall of the process")
    r.add_argument("--workers", type=int, default=16, help="API requests in flight while applying a plan")
    r.add_argument("--snapshots", choices=("index", "list"), default="index",
                   help="where an epoch reads the cluster: the watch-fed Kopf indexes (default), or lists from the API server "
                        "(the old way, kept to measure the difference)")
    r.add_argument("--liveness", help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    r.add_argument("--metrics-port", type=int, default=0,
                   help="serve Prometheus /metrics on this port (0: only on the extender's port, when it runs)")
    r.add_argument("--metrics-host", default="127.0.0.1")
    r.add_argument("--prometheus-url", help="read observed rates and CPU of the PE instances from this Prometheus every micro epoch "
                   "(docs/pe-metrics.md); without it, statuses carry projections only")
    r.add_argument("--secrets-namespace", help="the only namespace whose Secrets the operator reads (FlowPools' member-cluster "
                   "kubeconfigs); default: POD_NAMESPACE, the in-cluster ServiceAccount's namespace, else default (docs/security.md)")
    r.add_argument("--allow-unsafe-kubeconfigs", action="store_true",
                   help="let member-cluster kubeconfigs run exec commands and auth providers and read files (default: inline credentials only)")
    r.add_argument("--web-port", type=int, default=0, help="serve the read-only web view of the plan on this port (0: off; docs/web.md)")
    r.add_argument("--web-host", default="127.0.0.1", help="address of the web view")
    _allowed_host_flag(r, "")
    r.set_defaults(func=lambda a: _lazy("soda_operator.runner", a))
    e = sub.add_parser("extender", help="run only the scheduler extender")
    e.add_argument("--port", type=int, default=8888)
    e.add_argument("--host", default="127.0.0.1")
    _extender_flags(e)
    e.set_defaults(func=lambda a: _lazy("soda_operator.soda.extender", a))
    d = sub.add_parser("simulate", help="play the PEs of a cluster whose pods run nothing (KWOK): the fluid data plane, "
                       "exporting per-pod stream rates and CPU use to Prometheus (docs/dataplane.md)")
    d.add_argument("--port", type=int, required=True, help="serve /metrics on this port")
    d.add_argument("--host", default="127.0.0.1")
    d.add_argument("--interval", type=float, default=1.0, help="seconds between two reads of the cluster and recomputations")
    d.add_argument("--true-functions", help="YAML: 'namespace/job:pe' or 'pe' -> {a, b, noise}, the PEs' true resource functions")
    d.add_argument("--seed", type=int, default=0, help="seed of the true functions' noise")
    d.add_argument("--namespace", help="only this namespace's PE pods, templates and jobs (default: all)")
    d.set_defaults(func=lambda a: _lazy("soda_operator.dataplane.simulate", a))
    args = ap.parse_args(argv)
    return int(args.func(args) or 0)


def _allowed_host_flag(p: argparse.ArgumentParser, also: str) -> None:
    p.add_argument("--web-allowed-host", action="append", default=[], metavar="HOST[:PORT]", type=_host,
                   help="a Host header the web view answers besides the loopback names and the address it listens on "
                        f"(repeatable; without a port, any port){' ' + also if also else ''}; any other gets 421 (docs/web.md)")


def _host(v: str) -> str:
    from .web.server import split_host

    if split_host(v) is None:
        raise argparse.ArgumentTypeError(f"--web-allowed-host must be a host name or address with an optional :port, not {v!r}")
    return v


def _extender_flags(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """TLS and limits of the extender (``kubesoda extender``, and ``kubesoda run`` with ``extender-``)."""
    env = "KUBESODA_EXTENDER_TLS_"
    p.add_argument(f"--{prefix}tls-cert-file", dest="tls_cert_file", help=f"serve HTTPS with this PEM certificate (default ${env}CERT)")
    p.add_argument(f"--{prefix}tls-key-file", dest="tls_key_file", help=f"its PEM private key (default ${env}KEY)")
    p.add_argument(f"--{prefix}tls-client-ca-file", dest="tls_client_ca_file",
                   help=f"require client certificates signed by this CA (default ${env}CLIENT_CA)")
    p.add_argument(f"--{prefix}max-body-bytes", dest="max_body_bytes", type=int, default=2 * 1024 * 1024,
                   help="requests with a larger body get 413 (default 2 MiB: docs/extender.md)")


def _priority(v: str) -> int | None:
    if v == "auto":
        return None
    try:
        return int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--priority must be an integer or 'auto', not {v!r}") from None


def _lazy(module: str, args: argparse.Namespace) -> int:
    import importlib

    try:
        mod = importlib.import_module(module)
    except ImportError:
        print(f"error: {module} is not available in this build", file=sys.stderr)
        return 2
    return int(mod.main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
