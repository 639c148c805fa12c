#!/usr/bin/env bash
# Install and start what servebuild and its tests need on a Debian/Ubuntu host (root, no systemd
# needed): a Docker engine with BuildKit, mmdebstrap, QEMU binfmt for arm64, and the venv.
# Idempotent: safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v /usr/bin/docker >/dev/null 2>&1 || need_apt+=(docker.io)
command -v mmdebstrap >/dev/null 2>&1 || need_apt+=(mmdebstrap)  # bases from the lock's Debian packages
[ -e /usr/bin/qemu-aarch64-static ] || need_apt+=(qemu-user-static binfmt-support)
command -v git >/dev/null 2>&1 || need_apt+=(git)
command -v docker-registry >/dev/null 2>&1 || need_apt+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || need_apt+=(apache2-utils)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)  # the farm test gives its second engine a bridge of its own
command -v ssh >/dev/null 2>&1 || need_apt+=(openssh-client)  # ssh:// farm engines
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)  # the envelope check in docs/how-to/publish.md (run by a test)
command -v jq >/dev/null 2>&1 || need_apt+=(jq)
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc)  # the smoke suite's C-extension probe, tested against a real compiler
[ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)  # the farm test reaches an engine through a real sshd
python3 -c 'import ensurepip' 2>/dev/null || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}"
  apt-get update -qq
  # packages are installed, not started: a policy that refuses service starts while apt runs
  # (openssh-server would otherwise start a daemon on port 22)
  made_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; made_policy=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  [ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d
fi

if ! /usr/bin/docker version >/dev/null 2>&1; then
  echo "setup: starting dockerd (log: /var/log/dockerd.log)"
  (setsid dockerd >/var/log/dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do /usr/bin/docker version >/dev/null 2>&1 && break; sleep 1; done
  /usr/bin/docker version >/dev/null 2>&1 || { echo "setup: dockerd did not start; see /var/log/dockerd.log" >&2; exit 1; }
fi

if [ "$(uname -m)" = x86_64 ] && [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || true
  update-binfmts --enable qemu-aarch64 || true
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q -r requirements-dev.txt
echo "setup: ready (docker $(/usr/bin/docker version --format '{{.Server.Version}}'), venv .venv)"
