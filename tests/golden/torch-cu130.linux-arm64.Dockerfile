# Rendered by servebuild from recipe torch-cu130 for linux/arm64. Do not edit: edit the recipe.
# recipe sha256: 23f22e5ea579e400bca532b08ee6e878090ef4c92ad8d04ff5d0a2d89a9a9022
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
 && echo /opt/engine/site > "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/servebuild-engine.pth" ) \
 && . /mnt/settle/end
# ---- engine stage: the engine installed into /opt/engine (by the install mode's steps)
FROM deps AS engine
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
 && apt-get install -y --no-install-recommends ca-certificates python3 \
 && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '3.12' else 'base image has Python ' + v + ', the recipe wants 3.12')" \
 && dpkg-query -W -f '${Package}=${Version}\n' > /tmp/apt-runtime.txt \
 && mkdir -p /opt/servebuild /workspace /root/.cache /root/.triton && mv /tmp/apt-runtime.txt /opt/servebuild/apt-runtime.txt ) \
 && . /mnt/settle/end

RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,from=deps,source=/opt/venv,target=/mnt/src \
    . /mnt/settle/begin \
 && ( sh /mnt/settle/copy stage /opt/venv ) \
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
ENV NVIDIA_DRIVER_CAPABILITIES="compute,utility" \
    NVIDIA_VISIBLE_DEVICES="all" \
    PATH="/opt/engine/site/bin:/opt/venv/bin:$PATH" \
    SERVEBUILD_MANIFEST="/opt/servebuild/manifest.json" \
    TORCH_CUDA_ARCH_LIST="9.0a" \
    VIRTUAL_ENV="/opt/venv"
# ---- runtime stage: the image
FROM runtime-base AS runtime
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=bind,source=manifest.json,target=/mnt/src \
    . /mnt/settle/begin \
 && ( sh /mnt/settle/copy context /opt/servebuild/manifest.json ) \
 && . /mnt/settle/end
WORKDIR /workspace
# hadolint ignore=DL3002
USER 0
CMD ["/opt/venv/bin/python"]
