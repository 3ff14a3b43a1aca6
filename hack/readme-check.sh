#!/usr/bin/env bash
# The README's "Using it" block, run verbatim on the local control plane (issue 48, item 4), then:
# - the example job's PE pods are Running (each on its planned node: the kubesoda scheduler called the
#   extender the block started);
# - a second `kubesoda run` on the port the first holds ends with one line naming the flag (no traceback)
#   and leaves no ClusterKopfPeering behind;
# - under the chart's ValidatingAdmissionPolicy for required jobs, a namespace editor is refused the
#   example as it is and accepted with the README's command for editors (required: false).
# It runs from the repository's root and uses the README's own paths: the control plane in
# .local/cluster (ports KUBESODA_PORT_BASE+0..9, default 27000), stopped at the end (make cluster-down).
# Exit status 0: the README works as written.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
unset KUBESODA_STATE  # the README's paths are the defaults' (.local/cluster)

# the indented lines of the "Using it" section, indentation removed
block="$(awk '/^## Using it/ {on = 1; next} on && /^## / {exit} on && /^    / {sub(/^    /, ""); print}' README.md)"
[ -n "$block" ] || { echo "readme-check: no indented block under '## Using it' in README.md" >&2; exit 1; }

script="$(mktemp)"
trap 'rm -f "$script"' EXIT
{
  cat <<'EOF'
set -euo pipefail
cleanup() {
  status=$?
  for pid in $(jobs -p); do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  make cluster-down >/dev/null 2>&1 || true
  exit $status
}
trap cleanup EXIT
echo "readme-check: running README.md's 'Using it' block" >&2
set -x
EOF
  printf '%s\n' "$block"
  cat <<'EOF'
set +x
echo "readme-check: the example job's pods" >&2
kubectl wait --for=jsonpath='{.status.phase}'=Running streamjob/clicks --timeout=240s
kubectl wait --for=jsonpath='{.status.phase}'=Running pod -l kubesoda.io/job=clicks --timeout=120s
kubectl get pods -l kubesoda.io/job=clicks -o wide
fail=0
for pod in $(kubectl get pods -l kubesoda.io/job=clicks -o name); do
  planned="$(kubectl get "$pod" -o jsonpath='{.metadata.annotations.kubesoda\.io/node}')"
  node="$(kubectl get "$pod" -o jsonpath='{.spec.nodeName}')"
  if [ "$planned" != "$node" ]; then echo "readme-check: $pod runs on $node, planned $planned" >&2; fail=1; fi
done

echo "readme-check: a second kubesoda run on the extender's port" >&2
if out="$(kubesoda run --peering readme-check --extender-port "$KUBESODA_EXTENDER_PORT" 2>&1)"; then
  echo "readme-check: a second kubesoda run on a busy port started" >&2; fail=1
fi
last="$(printf '%s\n' "$out" | tail -n 1)"
echo "  said: $last"
if printf '%s\n' "$out" | grep -q Traceback || [[ "$last" != "error: --extender-port $KUBESODA_EXTENDER_PORT"* ]]; then
  echo "readme-check: not one clear error:" >&2; printf '%s\n' "$out" >&2; fail=1
fi
if kubectl get clusterkopfpeering readme-check >/dev/null 2>&1; then
  echo "readme-check: the failed run left ClusterKopfPeering readme-check behind" >&2; fail=1
fi
echo "readme-check: a namespace editor under the chart's ValidatingAdmissionPolicy for required jobs" >&2
hack/helm.sh template kubesoda charts/kubesoda --kube-version "$(. hack/versions.env; echo "${K8S_VERSION#v}")" --show-only templates/required-policy.yaml | kubectl apply -f -
kubectl create namespace readme-editor
kubectl apply -f - <<'YAML'
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: streamjob-editor, namespace: readme-editor}
rules:
- {apiGroups: [kubesoda.io], resources: [streamjobs, streamtemplates], verbs: [get, list, create, update, patch, delete]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: streamjob-editors, namespace: readme-editor}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: streamjob-editor}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
YAML
refused=0
for _ in $(seq 1 30); do  # the policy takes a moment to reach the API server's admission chain
  if ! kubectl apply -n readme-editor --as alice -f examples/small-pipeline >/dev/null 2>&1; then refused=1; break; fi
  kubectl delete -n readme-editor streamjob clicks --wait=false >/dev/null 2>&1 || true
  sleep 1
done
[ "$refused" = 1 ] || { echo "readme-check: the policy never refused required: true from a namespace editor" >&2; fail=1; }
# the README's command for a namespace editor (its kubectl with the editor's namespace and identity)
if ! sed 's/required: true/required: false/' examples/small-pipeline/pipeline.yaml | kubectl apply -n readme-editor --as alice -f -; then
  echo "readme-check: the README's command for a namespace editor was refused" >&2; fail=1
fi
[ "$fail" = 0 ] && echo "readme-check: the README works as written" >&2
exit "$fail"
EOF
} >"$script"
bash "$script"
