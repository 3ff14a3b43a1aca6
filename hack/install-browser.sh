#!/usr/bin/env bash
# The browser the web view's e2e drives (e2e/test_web.py): Debian's Chromium, driven by Playwright
# from PyPI (the `playwright` package of the [test] extra; never `playwright install`, which would
# download a browser build of its own). Idempotent: does nothing when the browser is there.
#
#   KUBESODA_CHROMIUM  the browser to use (default /usr/bin/chromium)
#
# Elsewhere: any Chromium or Chrome works; install it with your system's package manager
# (Fedora: dnf install chromium; Arch: pacman -S chromium; macOS: brew install --cask chromium)
# and point KUBESODA_CHROMIUM at its executable.
set -euo pipefail

BROWSER="${KUBESODA_CHROMIUM:-/usr/bin/chromium}"
if [[ -x "$BROWSER" ]]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-browser: $BROWSER is missing and this is not a Debian-like system:" >&2
  echo "  install Chromium with your package manager and set KUBESODA_CHROMIUM to its path" >&2
  exit 1
fi
SUDO=""
if [[ "$(id -u)" != 0 ]]; then
  SUDO="sudo"
fi
echo "install-browser: installing Debian's chromium (for e2e/test_web.py)" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
"$BROWSER" --version >&2
