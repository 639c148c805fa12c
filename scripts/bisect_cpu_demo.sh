#!/bin/bash
# bisect on this CPU-only host, as the bench issue asks: the SGLang bookworm variants, --repeat 3, per-variant
# profiles and --env, each row measured by the image's own servebuild-bench. No GPU here, so the server the
# bench measures is transformers serve on the host's CPU (a tiny random Llama, scripts/tiny_model.py), reached
# with --network host: its TTFT and decode figures are the same server's for every row (they show that the
# mechanism works: the bench in each image, the interleaved rounds, the medians, the PNGs), while the in-image
# metrics differ per row: the import time of sglang's server args and which prefill policy the profile's
# launcher sets.
#   bash scripts/bisect_cpu_demo.sh [PORT]      (after scripts/setup.sh; needs the two variants' bases)
set -euo pipefail
cd "$(dirname "$0")/.."
port=${1:-8199}
work=$(mktemp -d)
.venv-serve/bin/python scripts/tiny_model.py "$work/tiny" >/dev/null
HF_HUB_OFFLINE=1 setsid .venv-serve/bin/transformers serve "$work/tiny" --port "$port" --device cpu >"$work/serve.log" 2>&1 &
server=$!
trap 'kill -- -$server 2>/dev/null || kill $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
B=/tmp/servebuild-bench
run="s=\$(date +%s%N); /opt/venv/bin/python -c 'import sglang.srt.server_args'; e=\$(date +%s%N)
servebuild-bench --url http://127.0.0.1:$port --suite tail,decode --requests 30 --runs 3 --max-tokens 32 --ignore-eos off --out $B
S=\$s E=\$e /opt/venv/bin/python -c \"import json, os; d = json.load(open('$B/bench.json')); d.update(import_server_args_s=round((int(os.environ['E']) - int(os.environ['S'])) / 1e9, 3), adaptive_prefill_off=int('ADAPTIVE_PREFILL=0;' in open(os.environ['SERVEBUILD_LAUNCHER']).read()), flavour=os.environ['FLAVOUR']); json.dump(d, open('$B/row.json', 'w'))\""
.venv/bin/invoke bisect --recipe sglang-native-fp8-bookworm --platform linux/amd64 \
  --ca-bundle /etc/ssl/certs/ca-certificates.crt --variants adaptive-prefill-only,original-fix \
  --profiles original-fix:sglang-native-fp8,adaptive-prefill-only:sglang-native-fp8,adaptive-prefill-only:sglang-native-fp8-fixed-prefill \
  --repeat 3 --env FLAVOUR=tart --network host --gpus none --keep $B --metrics-file $B/row.json --timeout 900 \
  --run "$run"
