#!/usr/bin/env bash
# The operator's install: servebuild alone, in .venv, from its hash-light pinned requirements
# (requirements.txt). It installs no system package and starts no service: it needs python3 (3.11+)
# with venv, and a Docker engine you run yourself; `invoke doctor` (run at the end) says what is missing.
# The test suite's setup is scripts/setup.sh (it installs and starts test services: read it first).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null \
  || { echo "install: python3 3.11 or newer is needed (found: $(python3 --version 2>&1))" >&2; exit 2; }
python3 -c 'import ensurepip, venv' 2>/dev/null \
  || { echo "install: python3 has no venv module; install it first (Debian/Ubuntu: apt-get install python3-venv)" >&2; exit 2; }
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
echo "install: servebuild is in .venv (run .venv/bin/invoke --list); checking this host:"
.venv/bin/invoke doctor "$@"
