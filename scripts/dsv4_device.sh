#!/bin/bash
# Stage and run the DSV4 GPU measurement (issue 44) on a lent GPU machine with no network: the engine's
# wheels travel in parts small enough for one device call each (a 62 MiB tree was refused; 44 MiB parts
# plus the project's tree pass), and every step is resumable: a call that ends (or a machine that stays
# warm) keeps what the last one left in /tmp/stage*, /tmp/site*, /tmp/tiny-dsv4 and /tmp/dsv4-out*.
# ENGINE is vllm (the default) or sglang; take, install and run default to the engine pack wrote (DIR/ENGINE).
#
#   here:  bash scripts/dsv4_device.sh fetch [ENGINE]      # the wheels pack takes, from the index
#          bash scripts/dsv4_device.sh reqs [ENGINE]       # the hashed set fetch asks for, on stdout
#          bash scripts/dsv4_device.sh pack DIR [ENGINE]   # DIR/p00..pNN, DIR/SHA256SUMS, DIR/src.tar.gz
#   there: bash DIR/dsv4_device.sh take DIR N              # part N into /tmp/stage (checked against SHA256SUMS)
#          bash DIR/dsv4_device.sh install DIR [ENGINE]    # the parts joined, every wheel into the site (--target)
#          bash DIR/dsv4_device.sh run DIR STEPS [ENGINE]  # tiny_dsv4.py model, then first_start_gpu.py STEPS
#
# vllm: vLLM 0.26.0's release wheel less its FA2 library (129 MB compressed: DSV4 on sm90 serves through
# FlashMLA, and vllm_flash_attn imports FA2 under try) and the deep_gemm builds for other Pythons, plus
# the pinned py3.12 amd64 set (constraints/vllm-dspark/py3.12-linux-amd64.txt) less what the device's
# image already holds (torch 2.11.0+cu130, triton 3.6.0, the CUDA libraries, numpy, transformers, ...;
# /work/.library/device/KINDS.md) and tokenspeed/PyNvVideoCodec (other backends, video). The wheels
# come from .whl/ (vllm-0.26.0-*.whl) and .whl/gpu/ (pip download --no-deps --require-hashes of that set:
# `fetch`, which takes the hashes from the constraints file, so what travels is what the image installs).
# After `install`, `run DIR precompile,warmrun,pack,packed,nospec` (scripts/dsv4_kernels.py builds every mHC
# variant in parallel first; a warmrun cut by a call's limit goes on in the next call on the same /cache).
#
# sglang: SGLang 0.5.16's release wheel (constraints/sglang/precompiled-py3.12-linux-amd64.txt, by its hash)
# with the recipe sglang-native-fp8's stack over it as an overlay of the patched files (scripts/dsv4_overlay.py
# makes it here from that wheel with servebuild's own source preparation, checks it, and applies it on the
# device after the install: variant local-stack, as #33276 needs the upstream git mirror), sglang-kernel less
# FA3 (flash_ops, 342 MB compressed: the dsv4 attention backend serves through FlashMLA, sgl_kernel.flashmla_ops,
# and FA3 loads only in flashattention_backend) and its sm100 build (the device is sm90), plus the pinned py3.12
# amd64 set (constraints/sglang/py3.12-linux-amd64.txt) less what the device holds (DEVICE_HAS) and SG_SKIP.
# What DSV4 on SGLang needs and travels: sglang-kernel (FlashMLA, hc_split_sinkhorn, the dsv4 fused rope/norm
# ops), sgl-deep-gemm (FP8 GEMMs, the mHC prenorm GEMM, the indexer's paged MQA logits), tilelang + z3-solver
# (the mHC kernels; libtvm.so links libz3.so), apache-tvm-ffi (SGLang's DSV4 JIT kernels: top-k, compress
# plan), flashinfer-python (sampling and norms), nvidia-cutlass-dsl (cu13 libs: quack, FA4), flash-attn-4,
# humming-kernels (Marlin), xgrammar (the grammar backend is made at scheduler start).
# Site: /tmp/site for vllm, /tmp/site-sg for sglang (one machine may hold both); out: /tmp/dsv4-out[-sg].
set -euo pipefail
cmd=${1:-} dir=${2:-}
# what the device image already holds (torch 2.11.0+cu130 and its CUDA libraries, triton, numpy), the other
# backends' kernels (tokenspeed), video (PyNvVideoCodec, torchcodec, opencv) and the build-time toolchain
# (cmake, the nvcc wheels: the device has nvcc 13.0.88 in /usr/local/cuda), CuTe DSL's CUDA 12 libraries (cu13 here)
DEVICE_HAS="torch torchvision torchaudio triton numpy nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
 nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
 nvidia-cusparselt-cu13 nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx tokenspeed-mla
 tokenspeed-triton pynvvideocodec opencv-python-headless torchcodec cmake nvidia-cuda-nvcc nvidia-cuda-crt
 nvidia-nvvm nvidia-cuda-cccl nvidia-cuda-nvdisasm nvidia-cutlass-dsl-libs-cu12"
# sglang only: what SGLang 0.5.16 serving DSV4 never imports and the device holds at its own version (pyarrow,
# pandas: datasets, the benchmarks; scipy, numba, llvmlite: inkling's multimodal and MoE-assignment code only),
# and nvidia-mathdx (the cuBLASDx headers only sglang/jit_kernel/lplb's load-balancing solver builds with)
SG_SKIP="pyarrow pandas scipy numba llvmlite nvidia-mathdx"
root=$(cd "$(dirname "$0")/.." && pwd)
# engine_of GIVEN: the engine argument, else the one pack recorded in DIR/ENGINE, else vllm; a given one that
# is not what DIR holds is refused (exit 2)
engine_of() {
  local given=${1:-} packed=""
  if [ -n "$dir" ] && [ -f "$dir/ENGINE" ]; then packed=$(cat "$dir/ENGINE"); fi
  case "${given:-${packed:-vllm}}" in
    vllm|sglang) ;;
    *) echo "dsv4_device.sh: engine ${given}: give vllm or sglang" >&2; return 2 ;;
  esac
  if [ -n "$given" ] && [ -n "$packed" ] && [ "$given" != "$packed" ]; then
    echo "dsv4_device.sh: $dir holds the $packed parts, not $given's" >&2; return 2
  fi
  echo "${given:-${packed:-vllm}}"
}
# per engine: the constraints set, where fetch puts the wheels, the site install fills, where run writes
engine_vars() {
  if [ "$1" = sglang ]; then
    SET=constraints/sglang/py3.12-linux-amd64.txt PRE=constraints/sglang/precompiled-py3.12-linux-amd64.txt
    WHL=$root/.whl/sg SKIP="$DEVICE_HAS $SG_SKIP" SITE=/tmp/site-sg STAGE=/tmp/stage-sg OUTD=/tmp/dsv4-out-sg
    WORKD=/tmp/dsv4-work-sg PRE_PLAT=manylinux_2_34_x86_64 BATCHED=12288
  else
    SET=constraints/vllm-dspark/py3.12-linux-amd64.txt PRE=constraints/vllm-dspark/precompiled-py3.12-linux-amd64.txt
    WHL=$root/.whl SKIP="$DEVICE_HAS" SITE=/tmp/site STAGE=/tmp/stage OUTD=/tmp/dsv4-out WORKD=/tmp/dsv4-work
    PRE_PLAT=manylinux_2_28_x86_64 BATCHED=8192
  fi
  SITEPTH=/tmp/sitepth
  [ "$1" = sglang ] && SITEPTH=/tmp/sitepth-sg
  return 0
}
reqs() {  # the hashed requirement lines of SET less SKIP
  python3 - "$root/$SET" "$SKIP" <<'PY'
import re, sys
skip, keep = set(sys.argv[2].split()), False
for line in open(sys.argv[1]).read().split("\n"):
    name = re.match(r"^([A-Za-z0-9_.-]+)==", line)
    keep = (name.group(1).lower() not in skip) if name else (keep and line.startswith(" "))
    if keep and not line.strip().startswith("#"):
        print(line)
PY
}
# pip --target runs no .pth file (nvidia-cutlass-dsl puts its `cutlass` package on the path with one)
sitepth() { mkdir -p "$SITEPTH" && echo "import site; site.addsitedir('$SITE')" >"$SITEPTH/sitecustomize.py"; }
case "$cmd" in
reqs)
  dir=""; engine=$(engine_of "${2:-}"); engine_vars "$engine"; reqs ;;
fetch)
  dir=""; engine=$(engine_of "${2:-}"); engine_vars "$engine"
  mkdir -p "$WHL/gpu"
  reqs >"/tmp/dsv4-gpu-req-$engine.txt"
  plats=""; for p in manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 \
    manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1 linux; do plats="$plats --platform ${p}_x86_64"; done
  "$root/.venv/bin/python" -m pip download -q --no-deps --require-hashes --only-binary=:all: --python-version 3.12 \
    --implementation cp $plats -d "$WHL/gpu" -r "/tmp/dsv4-gpu-req-$engine.txt"
  "$root/.venv/bin/python" -m pip download -q --no-deps --require-hashes --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform $PRE_PLAT -d "$WHL" -r "$root/$PRE"
  ls "$WHL" "$WHL/gpu" | wc -l ;;
pack)
  engine=$(engine_of "${3:-}"); engine_vars "$engine"
  rm -rf "$dir" && mkdir -p "$dir/slim"
  if [ "$engine" = sglang ]; then
    whl=$(ls "$WHL"/sglang-0.5.16-cp312-*.whl)
    cp "$whl" "$WHL"/gpu/sglang_kernel-0.4.5-*.whl "$dir/slim/"
    (cd "$dir/slim" && zip -q -d sglang_kernel-0.4.5-*.whl 'sgl_kernel/flash_ops.abi3.so' 'sgl_kernel/sm100/*')
    "$root/.venv/bin/python" "$root/scripts/dsv4_overlay.py" make --wheel "$whl" --out "$dir/slim/overlay"
    "$root/.venv/bin/python" "$root/scripts/dsv4_overlay.py" check --wheel "$whl" --overlay "$dir/slim/overlay"
    tar cf "$dir/all.tar" -C "$dir/slim" . -C "$WHL/gpu" --exclude 'sglang_kernel-*' .
    cp "$root/scripts/dsv4_overlay.py" "$dir/"
  else
    cp "$WHL"/vllm-0.26.0-*.whl "$dir/slim/"
    (cd "$dir/slim" && zip -q -d vllm-0.26.0-*.whl 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' \
       'vllm/third_party/deep_gemm/_C.cpython-31[0134]-x86_64-linux-gnu.so')
    tar cf "$dir/all.tar" -C "$dir/slim" . -C "$WHL/gpu" .
  fi
  (cd "$dir" && split -b 44M -d -a 2 all.tar p && rm -r all.tar slim && sha256sum p* >SHA256SUMS)
  git -C "$root" archive --format=tar.gz -o "$dir/src.tar.gz" HEAD servebuild scripts recipes constraints patches images pyproject.toml
  cp "$0" "$dir/dsv4_device.sh"
  echo "$engine" >"$dir/ENGINE"
  ls -la "$dir"; du -cb "$dir"/p?? | tail -1 ;;
take)
  engine_vars "$(engine_of "")"
  mkdir -p "$STAGE"
  part=$(printf 'p%02d' "$3")
  cp "$dir/$part" "$dir/SHA256SUMS" "$STAGE/"
  (cd "$STAGE" && grep " $part\$" SHA256SUMS | sha256sum -c --quiet)
  echo "staged: $(cd "$STAGE" && ls p?? | tr '\n' ' ')" ;;
install)
  engine=$(engine_of "${3:-}"); engine_vars "$engine"
  (cd "$STAGE" && sha256sum -c --quiet SHA256SUMS)
  rm -rf /tmp/wheels && mkdir -p /tmp/wheels && cat "$STAGE"/p?? | tar x -C /tmp/wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" /tmp/wheels/*.whl
  sitepth
  if [ "$engine" = sglang ]; then
    # the stack over the installed wheel: each file checked to be the wheel's own (or the stack's) before it is replaced
    python3 "$dir/dsv4_overlay.py" apply --overlay /tmp/wheels/overlay --site "$SITE"
    PYTHONPATH=$SITEPTH:$SITE python3 -c "import sglang, sgl_kernel, deep_gemm, tilelang, flashinfer, tvm_ffi, cutlass
import sglang.srt.managers.adaptive_prefill, sgl_kernel.flash_mla
print('sglang', sglang.__version__, 'sgl_kernel', sgl_kernel.__version__, 'tilelang', tilelang.__version__)"
  else
    PYTHONPATH=$SITEPTH:$SITE python3 -c "import vllm, tilelang, cutlass, flashinfer; print('vllm', vllm.__version__, 'tilelang', tilelang.__version__)"
  fi ;;
run)
  steps=$3 engine=$(engine_of "${4:-}"); engine_vars "$engine"
  mkdir -p /tmp/src && tar xzf "$dir/src.tar.gz" -C /tmp/src
  sitepth
  export PYTHONPATH=$SITEPTH:$SITE PATH=$SITE/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  if [ "$engine" = sglang ]; then  # SGLang's JIT kernels (tvm-ffi), FlashInfer and DeepGEMM build with the device's nvcc 13.0
    export CUDA_HOME=/usr/local/cuda PATH=$PATH:/usr/local/cuda/bin
  fi
  [ -f /tmp/tiny-dsv4/config.json ] || python3 /tmp/src/scripts/tiny_dsv4.py /tmp/tiny-dsv4
  python3 /tmp/src/scripts/dsv4_warm.py plan --engine "$engine" --sms auto --max-batched "$BATCHED" \
    >"/tmp/dsv4-plan-$engine.json" && head -c 600 "/tmp/dsv4-plan-$engine.json"
  python3 /tmp/src/scripts/first_start_gpu.py --engine "$engine" --workload dsv4 --model /tmp/tiny-dsv4 \
    --out "$OUTD" --work "$WORKD" --steps "$steps" --timeout "${DSV4_TIMEOUT:-420}" || echo "first_start_gpu: exit $?"
  if [ -n "${OUT:-}" ]; then
    cp "/tmp/dsv4-plan-$engine.json" "$OUTD"/*.json "$OUT/" 2>/dev/null || true
    tail -c 300000 "$(ls -t "$OUTD"/server-*.log | head -1)" >"$OUT/server-last.log" 2>/dev/null || true
  fi ;;
*) echo "usage: dsv4_device.sh reqs|fetch [ENGINE] | pack DIR [ENGINE] | take DIR N | install DIR [ENGINE] | run DIR STEPS [ENGINE]" >&2
   exit 2 ;;
esac
