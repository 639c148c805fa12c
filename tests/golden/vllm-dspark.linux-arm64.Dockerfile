# Rendered by servebuild from recipe vllm-dspark for linux/arm64. Do not edit: edit the recipe.
# recipe sha256: c609ff4c45777e4d0fc9c47ba8902b883b02bb530fe9dc5e03b618992311c4f9
# ---- deps stage: the hash-pinned Python environment (the same on every host and for every variant)
FROM nvidia/cuda:13.0.2-base-ubuntu24.04 AS deps
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INPUT=1
# hadolint ignore=DL3008
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=tmpfs,target=/var/lib/dpkg/updates \
    . /mnt/settle/begin \
 && ( rm -f /etc/apt/apt.conf.d/docker-clean \
 && apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '3.12' else 'base image has Python ' + v + ', the recipe wants 3.12')" \
 && dpkg-query -W -f '${Package}=${Version}\n' > /tmp/apt-build.txt \
 && python3 -m venv /opt/venv ) \
 && . /mnt/settle/end

ENV PATH=/opt/engine/site/bin:/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,source=requirements.txt,target=/mnt/src \
    . /mnt/settle/begin \
 && ( sh /mnt/settle/copy context /opt/servebuild/requirements.txt ) \
 && . /mnt/settle/end
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    . /mnt/settle/begin \
 && ( if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
 && pip install --require-hashes --no-deps -r /opt/servebuild/requirements.txt \
 && echo /opt/engine/site > "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/servebuild-engine.pth" \
 && ln -sfn lib /opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib64 && ln -sf libcudart.so.13 /opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so ) \
 && . /mnt/settle/end
# ---- engine stage: the engine installed into /opt/engine (by the install mode's steps)
FROM deps AS engine
# vllm 0.26.0 at 568afb3a13806beb53bb2e6bd518269357b237c0, install vllm-precompiled
ENV TORCH_CUDA_ARCH_LIST="9.0a"
ARG ENGINE_VERSION=0.26.0
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,source=precompiled.txt,target=/mnt/src \
    . /mnt/settle/begin \
 && ( sh /mnt/settle/copy context /opt/servebuild/precompiled.txt ) \
 && . /mnt/settle/end
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=source.tar,target=/mnt/source.tar \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    . /mnt/settle/begin \
 && ( if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
 && tar -xf /mnt/source.tar -C /tmp \
 && pip download --require-hashes --no-deps -d /tmp/wheels -r /opt/servebuild/precompiled.txt \
 && VLLM_USE_PRECOMPILED=1 VLLM_PRECOMPILED_WHEEL_LOCATION="$(ls /tmp/wheels/*.whl)" \
    SETUPTOOLS_SCM_PRETEND_VERSION="${ENGINE_VERSION}" \
    pip install --no-deps --no-build-isolation --target /opt/engine/site /tmp/src/. \
 && rm -rf /tmp/src /tmp/wheels ) \
 && . /mnt/settle/end
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    . /mnt/settle/begin \
 && ( mkdir -p /opt/engine/site \
 && find /opt/engine/site -name __pycache__ -type d -prune -exec rm -rf {} + \
 && { python -m compileall -q -f --invalidation-mode checked-hash /opt/engine/site || true; } \
 && pip list --format=freeze > /opt/servebuild/packages.txt ) \
 && . /mnt/settle/end
# ---- runtime stages: no build caches, no source trees. Layers in the order they change: base, apt,
# venv, engine, the release's kernels when shared, overlay (runtime-base); then what differs per profile
# and per build (launchers, the profile check's record, the manifest, CMD) last
FROM nvidia/cuda:13.0.2-base-ubuntu24.04 AS runtime-base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive
# hadolint ignore=DL3008
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=tmpfs,target=/var/lib/dpkg/updates \
    . /mnt/settle/begin \
 && ( rm -f /etc/apt/apt.conf.d/docker-clean \
 && apt-get update \
 && apt-get install -y --no-install-recommends build-essential ca-certificates numactl python3 python3-dev tini \
 && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '3.12' else 'base image has Python ' + v + ', the recipe wants 3.12')" \
 && dpkg-query -W -f '${Package}=${Version}\n' > /tmp/apt-runtime.txt \
 && mkdir -p /opt/servebuild /workspace /cache/deep_gemm /cache/flashinfer /cache/huggingface /cache/humming /cache/humming/tmp /cache/inductor /cache/tilelang /cache/triton /cache/tvm-ffi /cache/vllm && mv /tmp/apt-runtime.txt /opt/servebuild/apt-runtime.txt && chmod 1777 /cache /cache/deep_gemm /cache/flashinfer /cache/huggingface /cache/humming /cache/humming/tmp /cache/inductor /cache/tilelang /cache/triton /cache/tvm-ffi /cache/vllm ) \
 && . /mnt/settle/end

RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,from=deps,source=/opt/venv,target=/mnt/src \
    . /mnt/settle/begin \
 && ( sh /mnt/settle/copy stage /opt/venv ) \
 && . /mnt/settle/end
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    . /mnt/settle/begin \
 && ( mkdir -p /opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib/stubs \
 && echo '#include <cuda.h>' | gcc -E -P -I/opt/venv/lib/python3.12/site-packages/nvidia/cu13/include -x c - \
  | grep -oE '^(extern +)?CUresult +cu[A-Za-z0-9_]+ *\(' | grep -oE 'cu[A-Za-z0-9_]+' | sort -u > /tmp/libcuda.names \
 && test "$(wc -l < /tmp/libcuda.names)" -gt 300 \
 && sed 's/.*/int &(void) { return 999; }/' /tmp/libcuda.names > /tmp/libcuda-stub.c \
 && gcc -shared -fPIC -O0 -Wl,-soname,libcuda.so.1 -o /opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib/stubs/libcuda.so /tmp/libcuda-stub.c \
 && rm /tmp/libcuda.names /tmp/libcuda-stub.c ) \
 && . /mnt/settle/end
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,from=engine,source=/opt/engine,target=/mnt/src \
    . /mnt/settle/begin \
 && ( sh /mnt/settle/copy stage /opt/engine ) \
 && . /mnt/settle/end
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,from=engine,source=/opt/servebuild,target=/mnt/src \
    . /mnt/settle/begin \
 && ( sh /mnt/settle/copy stage /opt/servebuild ) \
 && . /mnt/settle/end
ENV CUDA_HOME="/opt/venv/lib/python3.12/site-packages/nvidia/cu13" \
    DG_JIT_CACHE_DIR="/cache/deep_gemm" \
    DO_NOT_TRACK="1" \
    FLASHINFER_WORKSPACE_BASE="/cache/flashinfer" \
    HF_HOME="/cache/huggingface" \
    HUMMING_CACHE_DIR="/cache/humming" \
    HUMMING_TMP_DIR="/cache/humming/tmp" \
    LIBRARY_PATH="/opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib64/stubs" \
    NVIDIA_DRIVER_CAPABILITIES="compute,utility" \
    NVIDIA_VISIBLE_DEVICES="all" \
    PATH="/opt/engine/site/bin:/opt/venv/bin:/opt/venv/lib/python3.12/site-packages/nvidia/cu13/bin:$PATH" \
    SERVEBUILD_MANIFEST="/opt/servebuild/manifest.json" \
    TILELANG_CACHE_DIR="/cache/tilelang" \
    TILELANG_CLEANUP_TEMP_FILES="1" \
    TORCHINDUCTOR_CACHE_DIR="/cache/inductor" \
    TORCH_CUDA_ARCH_LIST="9.0a" \
    TRITON_CACHE_DIR="/cache/triton" \
    TRITON_PTXAS_BLACKWELL_PATH="/opt/venv/lib/python3.12/site-packages/nvidia/cu13/bin/ptxas" \
    TRITON_PTXAS_PATH="/opt/venv/lib/python3.12/site-packages/nvidia/cu13/bin/ptxas" \
    TVM_FFI_CACHE_DIR="/cache/tvm-ffi" \
    VIRTUAL_ENV="/opt/venv" \
    VLLM_CACHE_ROOT="/cache/vllm" \
    VLLM_NO_USAGE_STATS="1"
# ---- profile-check stage: every launcher run once, stopped right after the engine's own argument parser
# has read its argv (no GPU, no model, no network needed); only its record reaches the image
# profile-check: built on this variant's engine (install vllm-precompiled installs the patched tree in one step: no release engine to share)
FROM runtime-base AS profile-check
# servebuild: unsettled (only the check's record reaches the image, copied there as a new file)
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,source=launchers,target=/mnt/launchers \
    --mount=type=bind,source=argcheck,target=/mnt/argcheck \
    . /mnt/settle/env \
 && ( cp -a --no-preserve=ownership /mnt/launchers/. /usr/local/bin/ \
 && mkdir -p /opt/servebuild/argcheck && cp -a --no-preserve=ownership /mnt/argcheck/. /opt/servebuild/argcheck/ \
 && /opt/venv/bin/python /opt/servebuild/argcheck/profile_check.py --recipe vllm-dspark --engine vllm --dist vllm --site /opt/servebuild/argcheck/site --hook /opt/servebuild/argcheck/hook.py --launchers /usr/local/bin --out /opt/servebuild/profiles-checked.json vllm-dspark-1m )
# ---- aot stage: kernels compiled ahead of time for 9.0a with no GPU, by the image's own
# packages and nvcc, where the server would put them (/cache); then moved to the seed the launchers copy
# aot: built on this variant's engine (install vllm-precompiled installs the patched tree in one step: no release engine to share)
FROM runtime-base AS aot
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,source=aot/,target=/mnt/src \
    . /mnt/settle/begin \
 && ( sh /mnt/settle/copy context /opt/servebuild/aot /opt/servebuild/aot/aot ) \
 && . /mnt/settle/end
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    . /mnt/settle/begin \
 && ( env CUDA_VISIBLE_DEVICES= /opt/venv/bin/python /opt/servebuild/aot/aot_build.py --spec /opt/servebuild/aot/spec.json --cache /cache --seed /opt/servebuild/seed ) \
 && . /mnt/settle/end
# ---- runtime stage: the image
FROM runtime-base AS runtime
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,from=aot,source=/opt/servebuild/seed,target=/mnt/src \
    . /mnt/settle/begin \
 && ( sh /mnt/settle/copy stage /opt/servebuild/seed ) \
 && . /mnt/settle/end
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,source=launchers,target=/mnt/launchers \
    --mount=type=bind,source=manifest.json,target=/mnt/manifest.json \
    . /mnt/settle/begin \
 && ( cp --preserve=mode,timestamps /mnt/launchers/* /usr/local/bin/ \
 && mkdir -p /usr/local/share/servebuild-bench/bench_prompts && cp --preserve=mode,timestamps /mnt/launchers/.bench/*.py /usr/local/share/servebuild-bench/ \
 && cp --preserve=mode,timestamps /mnt/launchers/.bench/bench_prompts/* /usr/local/share/servebuild-bench/bench_prompts/ \
 && mkdir -p /opt/servebuild/tools && cp --preserve=mode,timestamps /mnt/launchers/.tools/*.py /opt/servebuild/tools/ \
 && cp --preserve=mode,timestamps /mnt/launchers/.tools/*.pth /opt/venv/lib/python3.12/site-packages/ \
 && mkdir -p /opt/servebuild && cp --preserve=mode,timestamps /mnt/manifest.json /opt/servebuild/manifest.json ) \
 && . /mnt/settle/end
# servebuild: one new file (the profile check's record)
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,from=profile-check,source=/opt/servebuild/profiles-checked.json,target=/mnt/profiles-checked.json \
    sh /mnt/settle/new-file /mnt/profiles-checked.json /opt/servebuild/profiles-checked.json
EXPOSE 8000
ENV SERVEBUILD_HEALTH_URL="http://127.0.0.1:8000/health"
HEALTHCHECK --interval=30s --timeout=10s --start-period=1800s --retries=3 \
  CMD ["/opt/venv/bin/python", "-c", "import os, sys, urllib.request; sys.exit(0 if urllib.request.urlopen(os.environ['SERVEBUILD_HEALTH_URL'], timeout=8).status == 200 else 1)"]
WORKDIR /workspace
# hadolint ignore=DL3002
USER 0
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["/usr/local/bin/vllm-dspark-1m"]
