#!/bin/bash
# Run through the device tool on the H200 host (see docs/h200-jit-2026-11-29.log, call 4):
# an image-like CUDA_HOME (the host's 13.0.88 toolkit, NVIDIA's stubs dir replaced by
# the stub the images generate from cuda.h), then the triton and flashinfer probes with --launch.
set -uo pipefail
# expects the wheels in .whl/ (carried by the device tool)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
H=/tmp/cudahome
mkdir -p $H/lib/stubs
for d in bin include nvvm; do ln -s /usr/local/cuda/$d $H/$d; done
for f in /usr/local/cuda/lib64/*; do [ "$(basename "$f")" = stubs ] || ln -s "$f" $H/lib/; done
ln -s lib $H/lib64
echo '#include <cuda.h>' | gcc -E -P -I$H/include -x c - \
  | grep -oE '^(extern +)?CUresult +cu[A-Za-z0-9_]+ *\(' | grep -oE 'cu[A-Za-z0-9_]+' | sort -u > /tmp/libcuda.names
echo "stub entry points: $(wc -l < /tmp/libcuda.names)"
sed 's/.*/int &(void) { return 999; }/' /tmp/libcuda.names > /tmp/libcuda-stub.c
gcc -shared -fPIC -O0 -Wl,-soname,libcuda.so.1 -o $H/lib/stubs/libcuda.so /tmp/libcuda-stub.c || exit 1
readelf -d $H/lib/stubs/libcuda.so | grep SONAME
echo "driver libcuda files:"; ldconfig -p | grep -E 'libcuda\.so' ; ls -la /usr/lib/x86_64-linux-gnu/libcuda.so* 2>/dev/null
export CUDA_HOME=$H LIBRARY_PATH=$H/lib64/stubs TRITON_PTXAS_PATH=$H/bin/ptxas TRITON_PTXAS_BLACKWELL_PATH=$H/bin/ptxas
export TORCH_CUDA_ARCH_LIST=9.0a
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
mkdir -p "$OUT"
python3 tests/image/jit_probes.py triton flashinfer --launch --keep | tee "$OUT"/probes.jsonl
rc=$?
lib=$(find /tmp/jit-probes.*/flashinfer -name 'silu_and_mul.so' | head -1)
echo "== $lib"; readelf -d "$lib" | grep NEEDED
echo "== link trace: which libcuda ld took for -lcuda"
echo 'int cuInit(unsigned); int f(void){return cuInit(0);}' > /tmp/t.c
gcc -shared -fPIC /tmp/t.c -L$H/lib64/stubs -lcuda -Wl,-t -o /tmp/t.so 2>&1 | grep -i cuda
readelf -d /tmp/t.so | grep NEEDED
python3 -c "import ctypes; l=ctypes.CDLL('/tmp/t.so'); print('cuInit via the stub-linked module, resolved at run time by the driver:', l.f())"
exit $rc
