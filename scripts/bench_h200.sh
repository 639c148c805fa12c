#!/bin/bash
# invoke bench's suites against a real SGLang 0.5.16 server on a GPU host without Docker (the H200 device),
# started by servebuild-bench itself (--serve): the pinned wheels and the project's local patch (overlay of
# the patched python/sglang) in /tmp/site, a tiny random Llama with a locally trained tokenizer, every JIT
# cache under /cache (as in the images). Three bench runs, each starting and stopping its own server:
#   1. tail, empty /cache, no warm-up, no calibration: the first requests pay the live compiles (p99);
#   2. tail again on the now-warm /cache: no compile (the census counts 0 files written);
#   3. prefill, decode, story, grid.
#   bash scripts/bench_h200.sh PAYLOAD OUT     (PAYLOAD: wheels-2/, overlay/, model/ after wheels-1 is in /tmp/site)
set -u
P=$1 O=$2 S=/tmp/site
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
[ -f "$S/.h200srv-stage1" ] || { echo "bench_h200: $S lacks the first wheel set (the machine went cold?)"; exit 3; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$S" "$P"/wheels-2/*.whl || exit 2
tar xzf "$P/overlay/sglang-overlay.tar.gz" -C "$S" || exit 2
rm -rf /cache && mkdir -p /cache
export PYTHONPATH="$S" CUDA_HOME=/usr/local/cuda PATH="/usr/local/cuda/bin:$PATH" \
  TVM_FFI_CACHE_DIR=/cache/tvm-ffi TRITON_CACHE_DIR=/cache/triton SGLANG_CACHE_DIR=/cache/sglang \
  FLASHINFER_WORKSPACE_BASE=/cache/flashinfer TORCHINDUCTOR_CACHE_DIR=/cache/inductor XDG_CACHE_HOME=/cache/xdg \
  SGLANG_DG_CACHE_DIR=/cache/deep_gemm SGLANG_DSV4_ADAPTIVE_PREFILL=1
serve="python3 -m sglang.launch_server --model-path $P/model/tiny-llama --served-model-name tiny-llama --host 127.0.0.1 \
 --port 30000 --attention-backend triton --sampling-backend pytorch --grammar-backend none --disable-cuda-graph \
 --skip-server-warmup --mem-fraction-static 0.3 --max-running-requests 32 --enable-metrics --context-length 65536"
bench() { python3 servebuild/tools/servebuild_bench.py --url http://127.0.0.1:30000 --health-timeout 400 --serve "$serve" "$@"; }
mkdir -p /tmp/b
bench --suite tail --requests 100 --warmup 0 --calibrate off --out /tmp/b/tail-cold | tail -6
bench --suite tail --requests 100 --warmup 0 --calibrate off --out /tmp/b/tail-warm | tail -6
bench --suite prefill,decode,story,grid --out /tmp/b/all | tail -40
du -sb /cache/* > /tmp/b/cache-du.txt 2>&1
tar czf "$O/bench-h200.tgz" -C /tmp/b .
for d in tail-cold tail-warm all; do echo "== $d"; python3 -c "import json,sys; d=json.load(open('/tmp/b/$d/bench.json')); print({k: v for k, v in d.items() if k.startswith(('tail_ttft', 'tail_latency_s_p99', 'tail_jit', 'partial', 'error', 'requests', 'decode_tg_tps', 'story_tg_tps', 'prefill_8192'))})"; done
