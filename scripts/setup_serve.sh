#!/usr/bin/env bash
# The bench tests' real OpenAI-compatible server (transformers serve on the CPU, requirements-serve.txt) in a
# venv of its own, .venv-serve, apart from servebuild's. The bench tests run this on first use; idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv-serve/bin/python ] || python3 -m venv .venv-serve
.venv-serve/bin/python -m pip install -q -r requirements-serve.txt
