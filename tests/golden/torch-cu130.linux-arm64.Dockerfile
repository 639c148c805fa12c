# Rendered by servebuild from recipe torch-cu130 for linux/arm64. Do not edit: edit the recipe.
# recipe sha256: 3e07006f20c280902edadf265c7f6eb5aad12a64a753fccb919d209305b5674f
# ---- deps stage: compilers, caches and the hash-pinned Python environment (shared by every variant)
FROM nvidia/cuda:13.0.2-devel-ubuntu24.04 AS deps
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
ENV PATH=/opt/engine/site/bin:/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv
COPY requirements.txt /opt/servebuild/requirements.txt
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
 && pip install --require-hashes --no-deps -r /opt/servebuild/requirements.txt \
 && echo /opt/engine/site > "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/servebuild-engine.pth"
# ---- engine stage: the pinned source tarball with its patch stack, installed into /opt/engine
FROM deps AS engine
RUN mkdir -p /opt/engine/site \
 && pip list --format=freeze > /opt/servebuild/packages.txt
# ---- runtime stage: no compilers, no caches, no source trees; stable layers first, the engine last
FROM nvidia/cuda:13.0.2-runtime-ubuntu24.04 AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive
# hadolint ignore=DL3008
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    rm -f /etc/apt/apt.conf.d/docker-clean \
 && apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 \
 && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '3.12' else 'base image has Python ' + v + ', the recipe wants 3.12')" \
 && mkdir -p /workspace /root/.cache /root/.triton
COPY --from=deps /opt/venv /opt/venv
COPY --from=engine /opt/engine /opt/engine
COPY --from=engine /opt/servebuild /opt/servebuild
COPY manifest.json /opt/servebuild/manifest.json
ENV PATH=/opt/engine/site/bin:/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    SERVEBUILD_MANIFEST=/opt/servebuild/manifest.json
VOLUME ["/root/.cache", "/root/.triton"]
WORKDIR /workspace
# hadolint ignore=DL3002
USER 0
CMD ["/opt/venv/bin/python"]
