# Rendered by servebuild from recipe sglang-fused-fp4 for linux/amd64. Do not edit: edit the recipe.
# recipe sha256: 09190a87eb3a8e6e5abf174dd3398857e9b94ae79869ff4029db1e6cd168e295
# ---- build stage: compilers, caches and sources live here only
FROM nvidia/cuda:13.0.2-devel-ubuntu24.04 AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG MAX_JOBS=1
ARG NVCC_THREADS=1
ENV DEBIAN_FRONTEND=noninteractive \
    TORCH_CUDA_ARCH_LIST="9.0a" \
    MAX_JOBS=${MAX_JOBS} \
    NVCC_THREADS=${NVCC_THREADS} \
    CCACHE_DIR=/root/.cache/ccache \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INPUT=1
# hadolint ignore=DL3008
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    rm -f /etc/apt/apt.conf.d/docker-clean \
 && apt-get update \
 && apt-get install -y --no-install-recommends build-essential ccache git python3 python3-dev python3-venv \
 && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '3.12' else 'base image has Python ' + v + ', the recipe wants 3.12')" \
 && python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv
COPY requirements.txt /opt/servebuild/requirements.txt
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
 && pip install --require-hashes --no-deps -r /opt/servebuild/requirements.txt
# ---- engine: sglang 0.5.16 at fdebc938f7f4d16fe6b9f55dcd9a767cf0899ea1 + 4 patch(es), from the pinned source tarball
ADD source.tar /tmp/
COPY precompiled.txt /opt/servebuild/precompiled.txt
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
 && pip install --require-hashes --no-deps -r /opt/servebuild/precompiled.txt \
 && site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
 && cp -a /tmp/src/python/sglang/. "$site/sglang/" \
 && python -m compileall -q "$site/sglang" \
 && rm -rf /tmp/src
RUN pip list --format=freeze > /opt/servebuild/packages.txt
# ---- runtime stage: no compilers, no caches, no source trees
FROM nvidia/cuda:13.0.2-runtime-ubuntu24.04 AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive
# hadolint ignore=DL3008
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    rm -f /etc/apt/apt.conf.d/docker-clean \
 && apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 \
 && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '3.12' else 'base image has Python ' + v + ', the recipe wants 3.12')"
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/servebuild /opt/servebuild
COPY manifest.json /opt/servebuild/manifest.json
COPY launchers/ /usr/local/bin/
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    SERVEBUILD_MANIFEST=/opt/servebuild/manifest.json
RUN mkdir -p /workspace /root/.cache /root/.triton /root/.tilelang
VOLUME ["/root/.cache", "/root/.triton", "/root/.tilelang"]
WORKDIR /workspace
# hadolint ignore=DL3002
USER 0
CMD ["/usr/local/bin/sglang-fused-fp4"]
