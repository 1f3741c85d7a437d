#!/usr/bin/env bash
# Set up everything the tests need on a fresh machine, then run pytest.
#  - a virtual environment with dse and its test, search and plot extras
#  - the CPU build of PyTorch 2.13.0 (pinned: an unpinned torch pulls GBs of CUDA packages),
#    for the activation-memory ground-truth tests
#  - PostgreSQL binaries (Debian package), for the multi-worker search test; the test starts its own server
set -euo pipefail
cd "$(dirname "$0")/.."
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
      || echo "warning: could not install postgresql" >&2
  elif command -v sudo >/dev/null; then
    (sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
      || echo "warning: could not install postgresql" >&2
  fi
fi
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test,search,plot]' 'torch==2.13.0'
exec .venv/bin/python -m pytest "$@"
