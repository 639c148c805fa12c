#!/bin/bash
# bisect on this CPU-only host, as the bench issue asks: SGLang bookworm variants, --repeat 3, per-variant
# profiles and --env, with the CPU-only check (examples/ab/sglang_cpu_check.py: the patched code's 1M prefill
# chunk plan under the profile's own environment, and where the DSpark loader puts a shared expert), and the
# image's servebuild-bench measuring a server. No GPU here, so that server is transformers serve on the host's
# CPU (a tiny random Llama, scripts/tiny_model.py), reached with --network host: its TTFT and decode figures
# are one server's for every row (they show the mechanism: the bench inside each image, interleaved rounds,
# medians, PNGs), while the check's figures differ per variant and profile.
#   bash scripts/bisect_cpu_demo.sh [PORT]      (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
port=${1:-8199}
work=$(mktemp -d)
bash scripts/setup_serve.sh
.venv-serve/bin/python scripts/tiny_model.py "$work/tiny" >/dev/null
HF_HUB_OFFLINE=1 setsid .venv-serve/bin/transformers serve "$work/tiny" --port "$port" --device cpu >"$work/serve.log" 2>&1 &
server=$!
trap 'kill -- -$server 2>/dev/null || kill $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
B=/tmp/servebuild-bench
run="eval \"\$(grep '^\[ -n' \"\$SERVEBUILD_LAUNCHER\")\"
/opt/venv/bin/python /checks/sglang_cpu_check.py > /tmp/check.json || exit 1
servebuild-bench --url http://127.0.0.1:$port --suite tail,decode --requests 30 --runs 3 --max-tokens 32 --ignore-eos off --out $B
/opt/venv/bin/python -c \"import json, os; d = json.load(open('$B/bench.json')); d.update(json.load(open('/tmp/check.json')), flavour=os.environ['FLAVOUR']); json.dump(d, open('$B/row.json', 'w'))\""
.venv/bin/invoke bisect --recipe sglang-native-fp8-bookworm --platform linux/amd64 \
  --ca-bundle /etc/ssl/certs/ca-certificates.crt --variants pad=sglang-dsv4-verify-pad,local-stack,original-fix \
  --profiles local-stack:sglang-native-fp8,local-stack:sglang-native-fp8-fixed-prefill \
  --repeat 3 --env FLAVOUR=tart --network host --gpus none --keep $B --metrics-file $B/row.json --timeout 900 \
  --volume "$PWD/examples/ab:/checks:ro" --run "$run"
