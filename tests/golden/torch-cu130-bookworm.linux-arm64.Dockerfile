# Rendered by servebuild from recipe torch-cu130-bookworm for linux/arm64. Do not edit: edit the recipe.
# recipe sha256: 8da7cab1f40c13cc125d56bb130e2f10bd4619d8e6a6ff5f50742ba5c2b7fdf5
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
FROM servebuild/debian:bookworm-arm64 AS runtime-base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive
# pinned by the lock (24 packages): ca-certificates:all=20230311+deb12u1 libexpat1:arm64=2.5.0-1+deb12u2 libgssapi-krb5-2:arm64=1.20.1-2+deb12u5 libk5crypto3:arm64=1.20.1-2+deb12u5 libkeyutils1:arm64=1.6.3-2 libkrb5-3:arm64=1.20.1-2+deb12u5 libkrb5support0:arm64=1.20.1-2+deb12u5 libncursesw6:arm64=6.4-4 libnsl2:arm64=1.3.0-2 libpython3-stdlib:arm64=3.11.2-1+b1 libpython3.11-minimal:arm64=3.11.2-6+deb12u8 libpython3.11-stdlib:arm64=3.11.2-6+deb12u8 libreadline8:arm64=8.2-1.3 libsqlite3-0:arm64=3.40.1-2+deb12u2 libssl3:arm64=3.0.20-1~deb12u2 libtirpc-common:all=1.3.3+ds-1 libtirpc3:arm64=1.3.3+ds-1 media-types:all=10.0.0 openssl:arm64=3.0.20-1~deb12u2 python3:arm64=3.11.2-1+b1 python3-minimal:arm64=3.11.2-1+b1 python3.11:arm64=3.11.2-6+deb12u8 python3.11-minimal:arm64=3.11.2-6+deb12u8 readline-common:all=8.2-1.3
RUN --mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle \
    --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=tmpfs,target=/var/lib/dpkg/updates \
    --mount=type=bind,source=debs/runtime,target=/mnt/debs \
    . /mnt/settle/begin \
 && ( apt-get install -y --no-install-recommends /mnt/debs/*.deb \
 && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '3.11' else 'base image has Python ' + v + ', the recipe wants 3.11')" \
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
