# Rendered by servebuild from recipe torch-cu130 for linux/amd64. Do not edit: edit the recipe.
# recipe sha256: 23f22e5ea579e400bca532b08ee6e878090ef4c92ad8d04ff5d0a2d89a9a9022
# ---- deps stage: the hash-pinned Python environment (the same on every host and for every variant)
FROM nvidia/cuda:13.0.2-base-ubuntu24.04 AS deps
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INPUT=1
# hadolint ignore=DL3008
RUN --mount=type=tmpfs,target=/tmp \
    --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=tmpfs,target=/var/lib/dpkg/updates \
    touch /tmp/.servebuild-layer-start && export SOURCE_DATE_EPOCH=946684800 PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 && { find /usr /opt -xdev -printf '%T@\n' > /tmp/.servebuild-layer-times 2>/dev/null || true; } && sort -n -r -o /tmp/.servebuild-layer-times /tmp/.servebuild-layer-times && { read -r newest < /tmp/.servebuild-layer-times || newest=0; } && rm /tmp/.servebuild-layer-times && export SERVEBUILD_SETTLED=$(( ${newest%%.*} + 1 > 946684800 ? ${newest%%.*} + 1 : 946684800 )) \
 && ( rm -f /etc/apt/apt.conf.d/docker-clean \
 && apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '3.12' else 'base image has Python ' + v + ', the recipe wants 3.12')" \
 && dpkg-query -W -f '${Package}=${Version}\n' > /tmp/apt-build.txt \
 && python3 -m venv /opt/venv ) \
 && find /var/log /var/cache/ldconfig -xdev -type f -newer /tmp/.servebuild-layer-start -exec truncate -s 0 {} + && find / -xdev -newer /tmp/.servebuild-layer-start -exec touch -h -d "@$SERVEBUILD_SETTLED" {} + && rm /tmp/.servebuild-layer-start

ENV PATH=/opt/engine/site/bin:/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv
RUN --mount=type=tmpfs,target=/tmp \
    --mount=type=tmpfs,target=/mnt \
    --mount=type=bind,source=requirements.txt,target=/mnt/src \
    touch /tmp/.servebuild-layer-start && export SOURCE_DATE_EPOCH=946684800 PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 && { find /usr /opt -xdev -printf '%T@\n' > /tmp/.servebuild-layer-times 2>/dev/null || true; } && sort -n -r -o /tmp/.servebuild-layer-times /tmp/.servebuild-layer-times && { read -r newest < /tmp/.servebuild-layer-times || newest=0; } && rm /tmp/.servebuild-layer-times && export SERVEBUILD_SETTLED=$(( ${newest%%.*} + 1 > 946684800 ? ${newest%%.*} + 1 : 946684800 )) \
 && ( if [ -d /mnt/src ]; then mkdir -p /opt/servebuild/requirements.txt && cp -a --no-preserve=ownership /mnt/src/. /opt/servebuild/requirements.txt && find /mnt/src -type d -exec sh -c 'for d; do touch -h -d "@$SERVEBUILD_SETTLED" "$0${d#/mnt/src}"; done' /opt/servebuild/requirements.txt {} +; else mkdir -p /opt/servebuild && cp -a --no-preserve=ownership /mnt/src /opt/servebuild/requirements.txt; fi ) \
 && find /var/log /var/cache/ldconfig -xdev -type f -newer /tmp/.servebuild-layer-start -exec truncate -s 0 {} + && find / -xdev -newer /tmp/.servebuild-layer-start -exec touch -h -d "@$SERVEBUILD_SETTLED" {} + && rm /tmp/.servebuild-layer-start
RUN --mount=type=tmpfs,target=/tmp \
    --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=netrc,target=/root/.netrc \
    touch /tmp/.servebuild-layer-start && export SOURCE_DATE_EPOCH=946684800 PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 && { find /usr /opt -xdev -printf '%T@\n' > /tmp/.servebuild-layer-times 2>/dev/null || true; } && sort -n -r -o /tmp/.servebuild-layer-times /tmp/.servebuild-layer-times && { read -r newest < /tmp/.servebuild-layer-times || newest=0; } && rm /tmp/.servebuild-layer-times && export SERVEBUILD_SETTLED=$(( ${newest%%.*} + 1 > 946684800 ? ${newest%%.*} + 1 : 946684800 )) \
 && ( if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
 && pip install --require-hashes --no-deps -r /opt/servebuild/requirements.txt \
 && echo /opt/engine/site > "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/servebuild-engine.pth" ) \
 && find /var/log /var/cache/ldconfig -xdev -type f -newer /tmp/.servebuild-layer-start -exec truncate -s 0 {} + && find / -xdev -newer /tmp/.servebuild-layer-start -exec touch -h -d "@$SERVEBUILD_SETTLED" {} + && rm /tmp/.servebuild-layer-start
# ---- engine stage: the engine installed into /opt/engine (by the install mode's steps)
FROM deps AS engine
RUN --mount=type=tmpfs,target=/tmp \
    touch /tmp/.servebuild-layer-start && export SOURCE_DATE_EPOCH=946684800 PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 && { find /usr /opt -xdev -printf '%T@\n' > /tmp/.servebuild-layer-times 2>/dev/null || true; } && sort -n -r -o /tmp/.servebuild-layer-times /tmp/.servebuild-layer-times && { read -r newest < /tmp/.servebuild-layer-times || newest=0; } && rm /tmp/.servebuild-layer-times && export SERVEBUILD_SETTLED=$(( ${newest%%.*} + 1 > 946684800 ? ${newest%%.*} + 1 : 946684800 )) \
 && ( mkdir -p /opt/engine/site \
 && find /opt/engine/site -name __pycache__ -type d -prune -exec rm -rf {} + \
 && { python -m compileall -q -f --invalidation-mode checked-hash /opt/engine/site || true; } \
 && pip list --format=freeze > /opt/servebuild/packages.txt ) \
 && find /var/log /var/cache/ldconfig -xdev -type f -newer /tmp/.servebuild-layer-start -exec truncate -s 0 {} + && find / -xdev -newer /tmp/.servebuild-layer-start -exec touch -h -d "@$SERVEBUILD_SETTLED" {} + && rm /tmp/.servebuild-layer-start
# ---- runtime stages: no build caches, no source trees. Layers in the order they change: base, apt,
# venv, engine, the release's kernels when shared, overlay (runtime-base); then what differs per profile
# and per build (launchers, the profile check's record, the manifest, CMD) last
FROM nvidia/cuda:13.0.2-base-ubuntu24.04 AS runtime-base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive
# hadolint ignore=DL3008
RUN --mount=type=tmpfs,target=/tmp \
    --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=tmpfs,target=/var/lib/dpkg/updates \
    touch /tmp/.servebuild-layer-start && export SOURCE_DATE_EPOCH=946684800 PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 && { find /usr /opt -xdev -printf '%T@\n' > /tmp/.servebuild-layer-times 2>/dev/null || true; } && sort -n -r -o /tmp/.servebuild-layer-times /tmp/.servebuild-layer-times && { read -r newest < /tmp/.servebuild-layer-times || newest=0; } && rm /tmp/.servebuild-layer-times && export SERVEBUILD_SETTLED=$(( ${newest%%.*} + 1 > 946684800 ? ${newest%%.*} + 1 : 946684800 )) \
 && ( rm -f /etc/apt/apt.conf.d/docker-clean \
 && apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 \
 && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '3.12' else 'base image has Python ' + v + ', the recipe wants 3.12')" \
 && dpkg-query -W -f '${Package}=${Version}\n' > /tmp/apt-runtime.txt \
 && mkdir -p /opt/servebuild /workspace /root/.cache /root/.triton && mv /tmp/apt-runtime.txt /opt/servebuild/apt-runtime.txt ) \
 && find /var/log /var/cache/ldconfig -xdev -type f -newer /tmp/.servebuild-layer-start -exec truncate -s 0 {} + && find / -xdev -newer /tmp/.servebuild-layer-start -exec touch -h -d "@$SERVEBUILD_SETTLED" {} + && rm /tmp/.servebuild-layer-start

RUN --mount=type=tmpfs,target=/tmp \
    --mount=type=tmpfs,target=/mnt \
    --mount=type=bind,from=deps,source=/opt/venv,target=/mnt/src \
    touch /tmp/.servebuild-layer-start && export SOURCE_DATE_EPOCH=946684800 PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 && { find /usr /opt -xdev -printf '%T@\n' > /tmp/.servebuild-layer-times 2>/dev/null || true; } && sort -n -r -o /tmp/.servebuild-layer-times /tmp/.servebuild-layer-times && { read -r newest < /tmp/.servebuild-layer-times || newest=0; } && rm /tmp/.servebuild-layer-times && export SERVEBUILD_SETTLED=$(( ${newest%%.*} + 1 > 946684800 ? ${newest%%.*} + 1 : 946684800 )) \
 && ( if [ -d /mnt/src ]; then mkdir -p /opt/venv && cp -a --no-preserve=ownership /mnt/src/. /opt/venv; else mkdir -p /opt && cp -a --no-preserve=ownership /mnt/src /opt/venv; fi ) \
 && find /var/log /var/cache/ldconfig -xdev -type f -newer /tmp/.servebuild-layer-start -exec truncate -s 0 {} + && find / -xdev -newer /tmp/.servebuild-layer-start -exec touch -h -d "@$SERVEBUILD_SETTLED" {} + && rm /tmp/.servebuild-layer-start
RUN --mount=type=tmpfs,target=/tmp \
    --mount=type=tmpfs,target=/mnt \
    --mount=type=bind,from=engine,source=/opt/engine,target=/mnt/src \
    touch /tmp/.servebuild-layer-start && export SOURCE_DATE_EPOCH=946684800 PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 && { find /usr /opt -xdev -printf '%T@\n' > /tmp/.servebuild-layer-times 2>/dev/null || true; } && sort -n -r -o /tmp/.servebuild-layer-times /tmp/.servebuild-layer-times && { read -r newest < /tmp/.servebuild-layer-times || newest=0; } && rm /tmp/.servebuild-layer-times && export SERVEBUILD_SETTLED=$(( ${newest%%.*} + 1 > 946684800 ? ${newest%%.*} + 1 : 946684800 )) \
 && ( if [ -d /mnt/src ]; then mkdir -p /opt/engine && cp -a --no-preserve=ownership /mnt/src/. /opt/engine; else mkdir -p /opt && cp -a --no-preserve=ownership /mnt/src /opt/engine; fi ) \
 && find /var/log /var/cache/ldconfig -xdev -type f -newer /tmp/.servebuild-layer-start -exec truncate -s 0 {} + && find / -xdev -newer /tmp/.servebuild-layer-start -exec touch -h -d "@$SERVEBUILD_SETTLED" {} + && rm /tmp/.servebuild-layer-start
RUN --mount=type=tmpfs,target=/tmp \
    --mount=type=tmpfs,target=/mnt \
    --mount=type=bind,from=engine,source=/opt/servebuild,target=/mnt/src \
    touch /tmp/.servebuild-layer-start && export SOURCE_DATE_EPOCH=946684800 PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 && { find /usr /opt -xdev -printf '%T@\n' > /tmp/.servebuild-layer-times 2>/dev/null || true; } && sort -n -r -o /tmp/.servebuild-layer-times /tmp/.servebuild-layer-times && { read -r newest < /tmp/.servebuild-layer-times || newest=0; } && rm /tmp/.servebuild-layer-times && export SERVEBUILD_SETTLED=$(( ${newest%%.*} + 1 > 946684800 ? ${newest%%.*} + 1 : 946684800 )) \
 && ( if [ -d /mnt/src ]; then mkdir -p /opt/servebuild && cp -a --no-preserve=ownership /mnt/src/. /opt/servebuild; else mkdir -p /opt && cp -a --no-preserve=ownership /mnt/src /opt/servebuild; fi ) \
 && find /var/log /var/cache/ldconfig -xdev -type f -newer /tmp/.servebuild-layer-start -exec truncate -s 0 {} + && find / -xdev -newer /tmp/.servebuild-layer-start -exec touch -h -d "@$SERVEBUILD_SETTLED" {} + && rm /tmp/.servebuild-layer-start
ENV NVIDIA_DRIVER_CAPABILITIES="compute,utility" \
    NVIDIA_VISIBLE_DEVICES="all" \
    PATH="/opt/engine/site/bin:/opt/venv/bin:$PATH" \
    SERVEBUILD_MANIFEST="/opt/servebuild/manifest.json" \
    TORCH_CUDA_ARCH_LIST="9.0a" \
    VIRTUAL_ENV="/opt/venv"
# ---- runtime stage: the image
FROM runtime-base AS runtime
RUN --mount=type=tmpfs,target=/tmp \
    --mount=type=tmpfs,target=/mnt \
    --mount=type=bind,source=manifest.json,target=/mnt/src \
    touch /tmp/.servebuild-layer-start && export SOURCE_DATE_EPOCH=946684800 PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 && { find /usr /opt -xdev -printf '%T@\n' > /tmp/.servebuild-layer-times 2>/dev/null || true; } && sort -n -r -o /tmp/.servebuild-layer-times /tmp/.servebuild-layer-times && { read -r newest < /tmp/.servebuild-layer-times || newest=0; } && rm /tmp/.servebuild-layer-times && export SERVEBUILD_SETTLED=$(( ${newest%%.*} + 1 > 946684800 ? ${newest%%.*} + 1 : 946684800 )) \
 && ( if [ -d /mnt/src ]; then mkdir -p /opt/servebuild/manifest.json && cp -a --no-preserve=ownership /mnt/src/. /opt/servebuild/manifest.json && find /mnt/src -type d -exec sh -c 'for d; do touch -h -d "@$SERVEBUILD_SETTLED" "$0${d#/mnt/src}"; done' /opt/servebuild/manifest.json {} +; else mkdir -p /opt/servebuild && cp -a --no-preserve=ownership /mnt/src /opt/servebuild/manifest.json; fi ) \
 && find /var/log /var/cache/ldconfig -xdev -type f -newer /tmp/.servebuild-layer-start -exec truncate -s 0 {} + && find / -xdev -newer /tmp/.servebuild-layer-start -exec touch -h -d "@$SERVEBUILD_SETTLED" {} + && rm /tmp/.servebuild-layer-start
WORKDIR /workspace
# hadolint ignore=DL3002
USER 0
CMD ["/opt/venv/bin/python"]
