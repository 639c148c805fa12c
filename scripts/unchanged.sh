#!/usr/bin/env bash
# Behaviour unchanged, for a refactoring commit: the 8 locks regenerate to the committed bytes, the golden
# Dockerfiles and fragment goldens match, and `invoke --list` prints what it printed at REF (default HEAD~1).
# Usage: bash scripts/unchanged.sh [REF]     (run from the checkout, after `bash scripts/setup.sh`)
set -euo pipefail
cd "$(dirname "$0")/.."
ref="${1:-HEAD~1}"
for lock in recipes/*.lock.yaml; do
  .venv/bin/invoke lock --recipe "$(basename "$lock" .lock.yaml)" >/dev/null
done
git diff --exit-code --stat recipes/ && echo "locks: byte-identical"
.venv/bin/python -m pytest tests/unit -q -p no:cacheprovider -k "golden or fragments" | tail -1
then=$(mktemp -d)
trap 'git worktree remove --force "$then" >/dev/null 2>&1 || true; rm -rf "$then"' EXIT
git worktree add -q --detach "$then" "$ref"
diff <(cd "$then" && "$OLDPWD/.venv/bin/invoke" --list) <(.venv/bin/invoke --list) && echo "invoke --list: the same as at $ref"
