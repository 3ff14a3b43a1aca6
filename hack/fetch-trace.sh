#!/usr/bin/env bash
# Fetch the SDSC-Par96 workload log (the trace of Lin 2014, section 6.3) into the cache, once, and check it.
#
#   hack/fetch-trace.sh        # prints the path of the checked file
#
# The file is the Parallel Workloads Archive's cleaned log SDSC-Par-1996-3.1-cln.swf.gz (32,135 jobs on the
# 416-node Intel Paragon at SDSC, 1996). It is never committed: benchmarks/bench_dispatch.py reads it from
# --swf, $KUBESODA_SDSC_PAR96 or this cache. The sha256 below is that of the copy in the public repository
# pooya-poi/cloudcomputing-workload-dataset at commit e12270907e34c3a0486be1110c4376a69ff10cca; the archive's own
# copy is tried second and accepted only if its bytes are the same.
set -euo pipefail
name=SDSC-Par-1996-3.1-cln.swf.gz
sha=cb1aab02b5e3c34659d1c1d6f73c002d415229c59f40c03fab4e20331abdaff7
urls=(
  "https://raw.githubusercontent.com/pooya-poi/cloudcomputing-workload-dataset/e12270907e34c3a0486be1110c4376a69ff10cca/$name"
  "https://www.cs.huji.ac.il/labs/parallel/workload/l_sdsc_par/$name"
)
cache="${KUBESODA_CACHE:-$HOME/.cache/kubesoda}/traces"
out="$cache/$name"
mkdir -p "$cache"
check() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$sha" ]; }
if check "$out"; then echo "$out"; exit 0; fi
for u in "${urls[@]}"; do
  echo "[fetch-trace] $u" >&2
  if curl -fsSL --retry 2 -o "$out.tmp" "$u" && check "$out.tmp"; then mv "$out.tmp" "$out"; echo "$out"; exit 0; fi
  echo "[fetch-trace] download failed or sha256 differs" >&2
done
rm -f "$out.tmp"
echo "[fetch-trace] could not fetch $name; benchmarks/bench_dispatch.py falls back to the model trace" >&2
exit 1
