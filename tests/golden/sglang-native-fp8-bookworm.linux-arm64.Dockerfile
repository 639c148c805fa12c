# Rendered by servebuild from recipe sglang-native-fp8-bookworm for linux/arm64. Do not edit: edit the recipe.
# recipe sha256: a2b52eec9cf695b57c30d6d610e6d4d94ae5e3efad33738c34c70598a0e3c4cd
# ---- deps stage: the hash-pinned Python environment (the same on every host and for every variant)
FROM servebuild/debian:bookworm-arm64 AS deps
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INPUT=1
# pinned by the lock (30 packages): ca-certificates:all=20230311+deb12u1 libexpat1:arm64=2.5.0-1+deb12u2 libgssapi-krb5-2:arm64=1.20.1-2+deb12u5 libk5crypto3:arm64=1.20.1-2+deb12u5 libkeyutils1:arm64=1.6.3-2 libkrb5-3:arm64=1.20.1-2+deb12u5 libkrb5support0:arm64=1.20.1-2+deb12u5 libncursesw6:arm64=6.4-4 libnsl2:arm64=1.3.0-2 libpython3-stdlib:arm64=3.11.2-1+b1 libpython3.11-minimal:arm64=3.11.2-6+deb12u8 libpython3.11-stdlib:arm64=3.11.2-6+deb12u8 libreadline8:arm64=8.2-1.3 libsqlite3-0:arm64=3.40.1-2+deb12u2 libssl3:arm64=3.0.20-1~deb12u2 libtirpc-common:all=1.3.3+ds-1 libtirpc3:arm64=1.3.3+ds-1 media-types:all=10.0.0 openssl:arm64=3.0.20-1~deb12u2 python3:arm64=3.11.2-1+b1 python3-distutils:all=3.11.2-3 python3-lib2to3:all=3.11.2-3 python3-minimal:arm64=3.11.2-1+b1 python3-pip-whl:all=23.0.1+dfsg-1 python3-setuptools-whl:all=66.1.1-1+deb12u2 python3-venv:arm64=3.11.2-1+b1 python3.11:arm64=3.11.2-6+deb12u8 python3.11-minimal:arm64=3.11.2-6+deb12u8 python3.11-venv:arm64=3.11.2-6+deb12u8 readline-common:all=8.2-1.3
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=tmpfs,target=/var/lib/dpkg/updates \
    --mount=type=bind,source=debs/build,target=/mnt/debs \
    . /mnt/settle/begin \
 && ( apt-get install -y --no-install-recommends /mnt/debs/*.deb \
 && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '3.11' else 'base image has Python ' + v + ', the recipe wants 3.11')" \
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
 && ln -sfn lib /opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib64 && ln -sf libcudart.so.13 /opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcudart.so ) \
 && . /mnt/settle/end
# ---- engine stage: the engine installed into /opt/engine (by the install mode's steps)
FROM deps AS engine
# sglang 0.5.16 at fdebc938f7f4d16fe6b9f55dcd9a767cf0899ea1, install wheel-overlay
ENV TORCH_CUDA_ARCH_LIST="9.0a"
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,source=precompiled.txt,target=/mnt/src \
    . /mnt/settle/begin \
 && ( sh /mnt/settle/copy context /opt/servebuild/precompiled.txt ) \
 && . /mnt/settle/end
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    . /mnt/settle/begin \
 && ( if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
 && pip install --require-hashes --no-deps --target /opt/engine/site -r /opt/servebuild/precompiled.txt \
 && mkdir -p /opt/engine-info && mv /opt/engine/site/*.dist-info /opt/engine-info/ ) \
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
FROM servebuild/debian:bookworm-arm64 AS runtime-release
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive
# pinned by the lock (81 packages): binutils:arm64=2.40-2 binutils-aarch64-linux-gnu:arm64=2.40-2 binutils-common:arm64=2.40-2 build-essential:arm64=12.9 bzip2:arm64=1.0.8-5+b1 ca-certificates:all=20230311+deb12u1 cpp:arm64=4:12.2.0-3 cpp-12:arm64=12.2.0-14+deb12u1 dpkg-dev:all=1.21.23 g++:arm64=4:12.2.0-3 g++-12:arm64=12.2.0-14+deb12u1 gcc:arm64=4:12.2.0-3 gcc-12:arm64=12.2.0-14+deb12u1 libasan8:arm64=12.2.0-14+deb12u1 libatomic1:arm64=12.2.0-14+deb12u1 libbinutils:arm64=2.40-2 libc-dev-bin:arm64=2.36-9+deb12u14 libc6-dev:arm64=2.36-9+deb12u14 libcc1-0:arm64=12.2.0-14+deb12u1 libcrypt-dev:arm64=1:4.4.33-2 libctf-nobfd0:arm64=2.40-2 libctf0:arm64=2.40-2 libdpkg-perl:all=1.21.23 libexpat1:arm64=2.5.0-1+deb12u2 libexpat1-dev:arm64=2.5.0-1+deb12u2 libgcc-12-dev:arm64=12.2.0-14+deb12u1 libgomp1:arm64=12.2.0-14+deb12u1 libgprofng0:arm64=2.40-2 libgssapi-krb5-2:arm64=1.20.1-2+deb12u5 libhwasan0:arm64=12.2.0-14+deb12u1 libisl23:arm64=0.25-1.1 libitm1:arm64=12.2.0-14+deb12u1 libjansson4:arm64=2.14-2 libjs-jquery:all=3.6.1+dfsg+~3.5.14-1 libjs-sphinxdoc:all=5.3.0-4 libjs-underscore:all=1.13.4~dfsg+~1.11.4-3 libk5crypto3:arm64=1.20.1-2+deb12u5 libkeyutils1:arm64=1.6.3-2 libkrb5-3:arm64=1.20.1-2+deb12u5 libkrb5support0:arm64=1.20.1-2+deb12u5 liblsan0:arm64=12.2.0-14+deb12u1 libmpc3:arm64=1.3.1-1 libmpfr6:arm64=4.2.0-1 libncursesw6:arm64=6.4-4 libnsl-dev:arm64=1.3.0-2 libnsl2:arm64=1.3.0-2 libnuma1:arm64=2.0.16-1 libpython3-dev:arm64=3.11.2-1+b1 libpython3-stdlib:arm64=3.11.2-1+b1 libpython3.11:arm64=3.11.2-6+deb12u8 libpython3.11-dev:arm64=3.11.2-6+deb12u8 libpython3.11-minimal:arm64=3.11.2-6+deb12u8 libpython3.11-stdlib:arm64=3.11.2-6+deb12u8 libreadline8:arm64=8.2-1.3 libsqlite3-0:arm64=3.40.1-2+deb12u2 libssl3:arm64=3.0.20-1~deb12u2 libstdc++-12-dev:arm64=12.2.0-14+deb12u1 libtirpc-common:all=1.3.3+ds-1 libtirpc-dev:arm64=1.3.3+ds-1 libtirpc3:arm64=1.3.3+ds-1 libtsan2:arm64=12.2.0-14+deb12u1 libubsan1:arm64=12.2.0-14+deb12u1 linux-libc-dev:arm64=6.1.176-1 make:arm64=4.3-4.1 media-types:all=10.0.0 numactl:arm64=2.0.16-1 openssl:arm64=3.0.20-1~deb12u2 patch:arm64=2.7.6-7 python3:arm64=3.11.2-1+b1 python3-dev:arm64=3.11.2-1+b1 python3-distutils:all=3.11.2-3 python3-lib2to3:all=3.11.2-3 python3-minimal:arm64=3.11.2-1+b1 python3.11:arm64=3.11.2-6+deb12u8 python3.11-dev:arm64=3.11.2-6+deb12u8 python3.11-minimal:arm64=3.11.2-6+deb12u8 readline-common:all=8.2-1.3 rpcsvc-proto:arm64=1.4.3-1 tini:arm64=0.19.0-1+b3 xz-utils:arm64=5.4.1-1+deb12u1 zlib1g-dev:arm64=1:1.2.13.dfsg-1
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=tmpfs,target=/var/lib/dpkg/updates \
    --mount=type=bind,source=debs/runtime,target=/mnt/debs \
    . /mnt/settle/begin \
 && ( apt-get install -y --no-install-recommends /mnt/debs/*.deb \
 && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '3.11' else 'base image has Python ' + v + ', the recipe wants 3.11')" \
 && dpkg-query -W -f '${Package}=${Version}\n' > /tmp/apt-runtime.txt \
 && mkdir -p /opt/servebuild /workspace /cache/deep_gemm /cache/flashinfer /cache/huggingface /cache/humming /cache/humming/tmp /cache/inductor /cache/sglang /cache/tilelang /cache/triton /cache/tvm-ffi && mv /tmp/apt-runtime.txt /opt/servebuild/apt-runtime.txt && chmod 1777 /cache /cache/deep_gemm /cache/flashinfer /cache/huggingface /cache/humming /cache/humming/tmp /cache/inductor /cache/sglang /cache/tilelang /cache/triton /cache/tvm-ffi ) \
 && . /mnt/settle/end

RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,from=deps,source=/opt/venv,target=/mnt/src \
    . /mnt/settle/begin \
 && ( sh /mnt/settle/copy stage /opt/venv ) \
 && . /mnt/settle/end
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    . /mnt/settle/begin \
 && ( mkdir -p /opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib/stubs \
 && echo '#include <cuda.h>' | gcc -E -P -I/opt/venv/lib/python3.11/site-packages/nvidia/cu13/include -x c - \
  | grep -oE '^(extern +)?CUresult +cu[A-Za-z0-9_]+ *\(' | grep -oE 'cu[A-Za-z0-9_]+' | sort -u > /tmp/libcuda.names \
 && test "$(wc -l < /tmp/libcuda.names)" -gt 300 \
 && sed 's/.*/int &(void) { return 999; }/' /tmp/libcuda.names > /tmp/libcuda-stub.c \
 && gcc -shared -fPIC -O0 -Wl,-soname,libcuda.so.1 -o /opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib/stubs/libcuda.so /tmp/libcuda-stub.c \
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
# ---- engine-release stage: the release engine as pip installed it; the build-time stages of a variant
# whose patches cannot change them run here, once for all such variants (render/reuse.py)
FROM runtime-release AS engine-release
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,from=engine,source=/opt/engine-info/,target=/mnt/src \
    . /mnt/settle/begin \
 && ( sh /mnt/settle/copy stage /opt/engine/site /opt/engine/site/engine-info ) \
 && . /mnt/settle/end
ENV CUDA_HOME="/opt/venv/lib/python3.11/site-packages/nvidia/cu13" \
    DG_JIT_CACHE_DIR="/cache/deep_gemm" \
    FLASHINFER_WORKSPACE_BASE="/cache/flashinfer" \
    HF_HOME="/cache/huggingface" \
    HUMMING_CACHE_DIR="/cache/humming" \
    HUMMING_TMP_DIR="/cache/humming/tmp" \
    LIBRARY_PATH="/opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib64/stubs" \
    NVIDIA_DRIVER_CAPABILITIES="compute,utility" \
    NVIDIA_VISIBLE_DEVICES="all" \
    PATH="/opt/engine/site/bin:/opt/venv/bin:/opt/venv/lib/python3.11/site-packages/nvidia/cu13/bin:$PATH" \
    SERVEBUILD_MANIFEST="/opt/servebuild/manifest.json" \
    SGLANG_CACHE_DIR="/cache/sglang" \
    SGLANG_DG_CACHE_DIR="/cache/deep_gemm" \
    TILELANG_CACHE_DIR="/cache/tilelang" \
    TORCHINDUCTOR_CACHE_DIR="/cache/inductor" \
    TORCH_CUDA_ARCH_LIST="9.0a" \
    TRITON_CACHE_DIR="/cache/triton" \
    TRITON_PTXAS_BLACKWELL_PATH="/opt/venv/lib/python3.11/site-packages/nvidia/cu13/bin/ptxas" \
    TRITON_PTXAS_PATH="/opt/venv/lib/python3.11/site-packages/nvidia/cu13/bin/ptxas" \
    TVM_FFI_CACHE_DIR="/cache/tvm-ffi" \
    VIRTUAL_ENV="/opt/venv"
# ---- the variant's engine: the release's kernels when they are shared (they change least), then the overlay
FROM runtime-release AS runtime-base
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,source=tools/overlay_package.py,target=/mnt/src \
    . /mnt/settle/begin \
 && ( sh /mnt/settle/copy context /opt/servebuild/tools/overlay_package.py ) \
 && . /mnt/settle/end
ARG ENGINE_VERSION=0.5.16
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,source=overlay.tar,target=/mnt/overlay.tar \
    --mount=type=bind,source=overlay-deleted.txt,target=/mnt/overlay-deleted.txt \
    --mount=type=bind,from=engine,source=/opt/engine-info,target=/mnt/engine-info \
    . /mnt/settle/begin \
 && ( mkdir -p /tmp/src/python/sglang && tar -xf /mnt/overlay.tar -C /tmp \
 && /opt/venv/bin/python /opt/servebuild/tools/overlay_package.py --site /opt/engine/site --dist sglang \
    --package sglang --tree /tmp/src/python/sglang --version "${ENGINE_VERSION}" \
    --info-from /mnt/engine-info --deleted /mnt/overlay-deleted.txt --deleted-under python/sglang \
 && rm -rf /tmp/src \
 && /opt/venv/bin/python -m pip list --format=freeze > /opt/servebuild/packages.txt ) \
 && . /mnt/settle/end
ENV CUDA_HOME="/opt/venv/lib/python3.11/site-packages/nvidia/cu13" \
    DG_JIT_CACHE_DIR="/cache/deep_gemm" \
    FLASHINFER_WORKSPACE_BASE="/cache/flashinfer" \
    HF_HOME="/cache/huggingface" \
    HUMMING_CACHE_DIR="/cache/humming" \
    HUMMING_TMP_DIR="/cache/humming/tmp" \
    LIBRARY_PATH="/opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib64/stubs" \
    NVIDIA_DRIVER_CAPABILITIES="compute,utility" \
    NVIDIA_VISIBLE_DEVICES="all" \
    PATH="/opt/engine/site/bin:/opt/venv/bin:/opt/venv/lib/python3.11/site-packages/nvidia/cu13/bin:$PATH" \
    SERVEBUILD_MANIFEST="/opt/servebuild/manifest.json" \
    SGLANG_CACHE_DIR="/cache/sglang" \
    SGLANG_DG_CACHE_DIR="/cache/deep_gemm" \
    TILELANG_CACHE_DIR="/cache/tilelang" \
    TORCHINDUCTOR_CACHE_DIR="/cache/inductor" \
    TORCH_CUDA_ARCH_LIST="9.0a" \
    TRITON_CACHE_DIR="/cache/triton" \
    TRITON_PTXAS_BLACKWELL_PATH="/opt/venv/lib/python3.11/site-packages/nvidia/cu13/bin/ptxas" \
    TRITON_PTXAS_PATH="/opt/venv/lib/python3.11/site-packages/nvidia/cu13/bin/ptxas" \
    TVM_FFI_CACHE_DIR="/cache/tvm-ffi" \
    VIRTUAL_ENV="/opt/venv"
# ---- profile-check stage: every launcher run once, stopped right after the engine's own argument parser
# has read its argv (no GPU, no model, no network needed); only its record reaches the image
# profile-check: built on this variant's engine (the patch stack's files are not known before its sources are prepared)
FROM runtime-base AS profile-check
# servebuild: unsettled (only the check's record reaches the image, copied there as a new file)
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,source=launchers,target=/mnt/launchers \
    --mount=type=bind,source=argcheck,target=/mnt/argcheck \
    . /mnt/settle/env \
 && ( cp -a --no-preserve=ownership /mnt/launchers/. /usr/local/bin/ \
 && mkdir -p /opt/servebuild/argcheck && cp -a --no-preserve=ownership /mnt/argcheck/. /opt/servebuild/argcheck/ \
 && /opt/venv/bin/python /opt/servebuild/argcheck/profile_check.py --recipe sglang-native-fp8-bookworm --engine sglang --dist sglang --site /opt/servebuild/argcheck/site --hook /opt/servebuild/argcheck/hook.py --launchers /usr/local/bin --out /opt/servebuild/profiles-checked.json sglang-native-fp8 sglang-native-fp8-fixed-prefill )
# ---- aot stage: kernels compiled ahead of time for 9.0a with no GPU, by the image's own
# packages and nvcc, where the server would put them (/cache); then moved to the seed the launchers copy
# aot: built on this variant's engine (the patch stack's files are not known before its sources are prepared)
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
 && cp --preserve=mode,timestamps /mnt/launchers/.tools/*.pth /opt/venv/lib/python3.11/site-packages/ \
 && mkdir -p /opt/servebuild && cp --preserve=mode,timestamps /mnt/manifest.json /opt/servebuild/manifest.json ) \
 && . /mnt/settle/end
# servebuild: one new file (the profile check's record)
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,from=profile-check,source=/opt/servebuild/profiles-checked.json,target=/mnt/profiles-checked.json \
    sh /mnt/settle/new-file /mnt/profiles-checked.json /opt/servebuild/profiles-checked.json
EXPOSE 30000
ENV SERVEBUILD_HEALTH_URL="http://127.0.0.1:30000/health"
HEALTHCHECK --interval=30s --timeout=10s --start-period=1800s --retries=3 \
  CMD ["/opt/venv/bin/python", "-c", "import os, sys, urllib.request; sys.exit(0 if urllib.request.urlopen(os.environ['SERVEBUILD_HEALTH_URL'], timeout=8).status == 200 else 1)"]
WORKDIR /workspace
# hadolint ignore=DL3002
USER 0
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["/usr/local/bin/sglang-native-fp8"]
