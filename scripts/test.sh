#!/usr/bin/env bash
# Set up everything the tests need on a fresh machine, then run pytest.
#  - a virtual environment with dse and its test, search and plot extras
#  - the CPU build of PyTorch 2.13.0 (pinned: an unpinned torch pulls GBs of CUDA packages),
#    for the activation-memory ground-truth tests, and Transformers 5.24.0 (test extra) for the parameter counts
#    checked against each model built on the meta device
#  - PostgreSQL binaries (Debian package), for the multi-worker search test; the test starts its own server
#  - Chromium (Debian package), for the tests that open the --html pages in a headless browser
# A system package that cannot be installed (no root, no sudo, no network) leaves a warning; its tests skip.
set -euo pipefail
cd "$(dirname "$0")/.."
apt_install() {   # apt_install PACKAGE: as root, or through sudo when there is one
  local run=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || return 0
    run=(sudo)
  fi
  if [ -z "${APT_UPDATED:-}" ]; then
    "${run[@]}" apt-get update -qq || { echo "warning: apt-get update failed" >&2; return 0; }
    APT_UPDATED=1
  fi
  "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null \
    || echo "warning: could not install $1" >&2
}
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || apt_install postgresql
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || apt_install chromium
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test,search,plot]' 'torch==2.13.0'
exec .venv/bin/python -m pytest "$@"
