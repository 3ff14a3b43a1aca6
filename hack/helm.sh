#!/usr/bin/env bash
# Run the cached, Go-module-built helm (hack/build-binaries.sh) with the given arguments.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$("$here/build-binaries.sh")"
exec "$bin/helm" "$@" 2> >(grep -v "found symbolic link in path" >&2)
