#!/bin/bash
# Stage and run the DSV4 GPU measurement (issue 44) on a lent GPU machine with no network: the engine's
# wheels travel in parts small enough for one device call each (a 62 MiB tree was refused; 44 MiB parts
# plus the project's tree pass), and every step is resumable: a call that ends (or a machine that stays
# warm) keeps what the last one left in /tmp/stage, /tmp/site, /tmp/tiny-dsv4 and /tmp/dsv4-out.
#
#   here:  bash scripts/dsv4_device.sh fetch        # .whl/ and .whl/gpu/ (the wheels pack takes), from PyPI
#          bash scripts/dsv4_device.sh pack DIR     # DIR/p00..pNN, DIR/SHA256SUMS, DIR/src.tar.gz
#   there: bash DIR/dsv4_device.sh take DIR N       # part N into /tmp/stage (checked against SHA256SUMS)
#          bash DIR/dsv4_device.sh install DIR      # the parts joined, every wheel into /tmp/site (--target)
#          bash DIR/dsv4_device.sh run DIR STEPS    # tiny_dsv4.py model, then first_start_gpu.py STEPS
#
# pack: vLLM 0.26.0's release wheel less its FA2 library (129 MB compressed: DSV4 on sm90 serves through
# FlashMLA, and vllm_flash_attn imports FA2 under try) and the deep_gemm builds for other Pythons, plus
# the pinned py3.12 amd64 set (constraints/vllm-dspark/py3.12-linux-amd64.txt) less what the device's
# image already holds (torch 2.11.0+cu130, triton 3.6.0, the CUDA libraries, numpy, transformers, ...;
# /work/.library/device/KINDS.md) and tokenspeed/PyNvVideoCodec (other backends, video). The wheels
# come from .whl/ (vllm-0.26.0-*.whl) and .whl/gpu/ (pip download --no-deps --require-hashes of that set:
# `fetch`, which takes the hashes from the constraints file, so what travels is what the image installs).
# After `install`, `run DIR precompile,warmrun,pack,packed,nospec` (scripts/dsv4_kernels.py builds every mHC
# variant in parallel first; a warmrun cut by a call's limit goes on in the next call on the same /cache).
set -euo pipefail
cmd=$1 dir=${2:-}
# what the device image already holds (torch 2.11.0+cu130 and its CUDA libraries, triton, numpy), the other
# backends' kernels (tokenspeed), video (PyNvVideoCodec, torchcodec, opencv) and the build-time toolchain
# (cmake, the nvcc wheels: the device has nvcc 13.0.88 in /usr/local/cuda), CuTe DSL's CUDA 12 libraries (cu13 here)
DEVICE_HAS="torch torchvision torchaudio triton numpy nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
 nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
 nvidia-cusparselt-cu13 nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx tokenspeed-mla
 tokenspeed-triton pynvvideocodec opencv-python-headless torchcodec cmake nvidia-cuda-nvcc nvidia-cuda-crt
 nvidia-nvvm nvidia-cuda-cccl nvidia-cuda-nvdisasm nvidia-cutlass-dsl-libs-cu12"
case "$cmd" in
fetch)
  root=$(cd "$(dirname "$0")/.." && pwd)
  mkdir -p "$root/.whl/gpu"
  python3 - "$root/constraints/vllm-dspark/py3.12-linux-amd64.txt" "$DEVICE_HAS" >/tmp/dsv4-gpu-req.txt <<'PY'
import re, sys
skip, keep = set(sys.argv[2].split()), False
for line in open(sys.argv[1]).read().split("\n"):
    name = re.match(r"^([A-Za-z0-9_.-]+)==", line)
    keep = (name.group(1).lower() not in skip) if name else (keep and line.startswith(" "))
    if keep and not line.strip().startswith("#"):
        print(line)
PY
  plats=""; for p in manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 \
    manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1 linux; do plats="$plats --platform ${p}_x86_64"; done
  "$root/.venv/bin/python" -m pip download -q --no-deps --require-hashes --only-binary=:all: --python-version 3.12 \
    --implementation cp $plats -d "$root/.whl/gpu" -r /tmp/dsv4-gpu-req.txt
  "$root/.venv/bin/python" -m pip download -q --no-deps --require-hashes --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d "$root/.whl" -r "$root/constraints/vllm-dspark/precompiled-py3.12-linux-amd64.txt"
  ls "$root/.whl" "$root/.whl/gpu" | wc -l ;;
pack)
  root=$(cd "$(dirname "$0")/.." && pwd)
  rm -rf "$dir" && mkdir -p "$dir/slim"
  cp "$root"/.whl/vllm-0.26.0-*.whl "$dir/slim/"
  (cd "$dir/slim" && zip -q -d vllm-0.26.0-*.whl 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' \
     'vllm/third_party/deep_gemm/_C.cpython-31[0134]-x86_64-linux-gnu.so')
  tar cf "$dir/all.tar" -C "$dir/slim" . -C "$root/.whl/gpu" .
  (cd "$dir" && split -b 44M -d -a 2 all.tar p && rm -r all.tar slim && sha256sum p* >SHA256SUMS)
  git -C "$root" archive --format=tar.gz -o "$dir/src.tar.gz" HEAD servebuild scripts recipes constraints patches images pyproject.toml
  cp "$0" "$dir/dsv4_device.sh"
  ls -la "$dir" ;;
take)
  mkdir -p /tmp/stage
  part=$(printf 'p%02d' "$3")
  cp "$dir/$part" "$dir/SHA256SUMS" /tmp/stage/
  (cd /tmp/stage && grep " $part\$" SHA256SUMS | sha256sum -c --quiet)
  echo "staged: $(cd /tmp/stage && ls p?? | tr '\n' ' ')" ;;
install)
  (cd /tmp/stage && sha256sum -c --quiet SHA256SUMS)
  rm -rf /tmp/wheels && mkdir -p /tmp/wheels && cat /tmp/stage/p?? | tar x -C /tmp/wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/wheels/*.whl
  mkdir -p /tmp/sitepth && echo "import site; site.addsitedir('/tmp/site')" >/tmp/sitepth/sitecustomize.py
  PYTHONPATH=/tmp/sitepth:/tmp/site python3 -c "import vllm, tilelang, cutlass, flashinfer; print('vllm', vllm.__version__, 'tilelang', tilelang.__version__)" ;;
run)
  steps=$3
  mkdir -p /tmp/src && tar xzf "$dir/src.tar.gz" -C /tmp/src
  # pip --target runs no .pth file (nvidia-cutlass-dsl puts its `cutlass` package on the path with one)
  mkdir -p /tmp/sitepth && echo "import site; site.addsitedir('/tmp/site')" >/tmp/sitepth/sitecustomize.py
  export PYTHONPATH=/tmp/sitepth:/tmp/site PATH=/tmp/site/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  [ -f /tmp/tiny-dsv4/config.json ] || python3 /tmp/src/scripts/tiny_dsv4.py /tmp/tiny-dsv4
  python3 /tmp/src/scripts/dsv4_warm.py plan --sms auto >/tmp/dsv4-plan.json && head -c 600 /tmp/dsv4-plan.json
  python3 /tmp/src/scripts/first_start_gpu.py --engine vllm --workload dsv4 --model /tmp/tiny-dsv4 \
    --out /tmp/dsv4-out --work /tmp/dsv4-work --steps "$steps" --timeout "${DSV4_TIMEOUT:-420}" || echo "first_start_gpu: exit $?"
  if [ -n "${OUT:-}" ]; then
    cp /tmp/dsv4-plan.json /tmp/dsv4-out/*.json "$OUT/" 2>/dev/null || true
    tail -c 300000 "$(ls -t /tmp/dsv4-out/server-*.log | head -1)" >"$OUT/server-last.log" 2>/dev/null || true
  fi ;;
*) echo "usage: dsv4_device.sh pack|take|install|run DIR ..." >&2; exit 2 ;;
esac
