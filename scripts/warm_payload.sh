#!/bin/bash
# Export what scripts/warm_h200.py measures on a GPU host: the seeds of the two engine images built here
# (their aot stage ran on this CPU-only machine) and the pinned wheels for the GPU host's Python.
#   bash scripts/warm_payload.sh DIR SGLANG_IMAGE VLLM_IMAGE [PYTHON_VERSION]
set -euo pipefail
out=$1 sgl=$2 vllm=$3 py=${4:-3.12}
rm -rf "$out" && mkdir -p "$out/wheels/deps" "$out/wheels/vllm"
for pair in "sgl-seed:$sgl" "vllm-seed:$vllm"; do
  dir=${pair%%:*} image=${pair#*:}
  id=$(docker create "$image" /bin/true)
  docker cp "$id:/opt/servebuild/seed" "$out/$dir"
  docker cp "$id:/opt/servebuild/manifest.json" "$out/$dir/manifest.json"
  docker rm "$id" >/dev/null
done
pin() { docker run --rm --entrypoint /opt/venv/bin/python "$1" -c "from importlib.metadata import version; print(version('$2'))"; }
dl() { .venv/bin/pip download -q --no-deps --only-binary=:all: --python-version "$py" --platform manylinux_2_34_x86_64 \
         --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 -d "$@"; }
dl "$out/wheels" "sglang==$(pin "$sgl" sglang | sed 's/+.*//')" "apache-tvm-ffi==$(pin "$sgl" apache-tvm-ffi)" \
   "flashinfer-python==$(pin "$vllm" flashinfer-python)"
dl "$out/wheels/vllm" "apache-tvm-ffi==$(pin "$vllm" apache-tvm-ffi)"
dl "$out/wheels/deps" einops tabulate click nvidia-ml-py tqdm ninja requests certifi charset_normalizer idna urllib3
du -sh "$out"
