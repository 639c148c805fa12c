"""A real registry with TLS (a private CA made in the test) and htpasswd basic auth.

Debian's docker-registry (distribution 2.8) on 127.0.0.1; the CA and server certificate come from
`trustme`; dockerd is told to trust the CA through /etc/docker/certs.d/127.0.0.1:PORT/ca.crt, which
`stop()` removes. The process can be killed and started again on the same port and storage (fault
tests). Every started process (and the engine's CA folder) is also removed at interpreter exit, so
none outlives the tests (no PR_SET_PDEATHSIG: it fires when the starting *thread* ends, and the
fault test restarts the registry from a timer thread).
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

from support import free_port

CERTS_D = Path("/etc/docker/certs.d")
_LIVE: set[subprocess.Popen] = set()
_CERT_DIRS: set[Path] = set()


def _kill_all() -> None:
    for proc in list(_LIVE):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for folder in list(_CERT_DIRS):
        shutil.rmtree(folder, ignore_errors=True)


atexit.register(_kill_all)


class TLSRegistry:
    def __init__(self, root: Path, users: Optional[dict[str, str]] = None, trust_engine: bool = True):
        import trustme
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.ca = trustme.CA()
        cert = self.ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = root / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.cert_file, self.key_file = root / "server.crt", root / "server.key"
        cert.cert_chain_pems[0].write_to_path(str(self.cert_file))
        for extra in cert.cert_chain_pems[1:]:
            extra.write_to_path(str(self.cert_file), append=True)
        cert.private_key_pem.write_to_path(str(self.key_file))
        self.key_pem = cert.private_key_pem.bytes()
        self.ca_key_pem = self.ca.private_key_pem.bytes()
        self.users = users or {}
        auth = ""
        if self.users:
            htpasswd = root / "htpasswd"
            for i, (user, password) in enumerate(self.users.items()):
                # -i: the password on stdin, never on a command line
                subprocess.run(["htpasswd", "-iB" + ("c" if i == 0 else ""), str(htpasswd), user],
                               input=password, text=True, check=True, capture_output=True)
            auth = f"auth: {{htpasswd: {{realm: test, path: {htpasswd}}}}}\n"
        self.config = root / "config.yml"
        self.config.write_text(
            f"version: 0.1\nlog: {{level: error}}\nstorage:\n  filesystem: {{rootdirectory: {root}/data}}\n"
            f"  delete: {{enabled: true}}\nhttp:\n  addr: 127.0.0.1:{self.port}\n"
            f"  tls: {{certificate: {self.cert_file}, key: {self.key_file}}}\n{auth}")
        self.engine_ca: Optional[Path] = None
        if trust_engine:
            self.trust_engine()
        self.proc: Optional[subprocess.Popen] = None
        self.start()

    def trust_engine(self) -> None:
        folder = CERTS_D / self.address
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.ca_file, folder / "ca.crt")
        self.engine_ca = folder
        _CERT_DIRS.add(folder)

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return  # already serving (a restart after a kill that never happened)
        self.proc = subprocess.Popen(["docker-registry", "serve", str(self.config)], stdout=subprocess.DEVNULL,
                                     stderr=open(self.root / "registry.log", "ab"), start_new_session=True)
        _LIVE.add(self.proc)
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        for _ in range(150):
            try:
                urllib.request.urlopen(f"https://{self.address}/v2/", timeout=1, context=ctx)
                return
            except urllib.error.HTTPError:
                return  # 401: up, asking for a login
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"docker-registry did not start; see {self.root / 'registry.log'}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc is not None:
            _LIVE.discard(self.proc)

    def stop(self) -> None:
        self.kill()
        if self.engine_ca is not None:
            shutil.rmtree(self.engine_ca, ignore_errors=True)
            _CERT_DIRS.discard(self.engine_ca)
            self.engine_ca = None

    # -- direct reads for assertions (independent of servebuild's client) --------------------------
    def _get(self, path: str, user: Optional[str] = None, accept: str = "") -> tuple[int, bytes, dict]:
        import base64
        user = user or next(iter(self.users), None)
        headers = {"Accept": accept} if accept else {}
        if user:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{self.users[user]}".encode()).decode()
        req = urllib.request.Request(f"https://{self.address}{path}", headers=headers)
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), dict(exc.headers)

    def catalog(self) -> list[str]:
        code, body, _ = self._get("/v2/_catalog")
        assert code == 200, (code, body)
        return json.loads(body).get("repositories") or []

    def tags(self, repo: str) -> list[str]:
        code, body, _ = self._get(f"/v2/{repo}/tags/list")
        if code == 404:
            return []
        assert code == 200, (code, body)
        return sorted(json.loads(body).get("tags") or [])

    def manifest(self, repo: str, ref: str) -> tuple[int, bytes]:
        accept = ("application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, "
                  "application/vnd.docker.distribution.manifest.v2+json")
        code, body, _ = self._get(f"/v2/{repo}/manifests/{ref}", accept=accept)
        return code, body

    def blob_path(self, digest: str) -> Path:
        hexd = digest.split(":", 1)[1]
        return self.root / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexd[:2] / hexd / "data"


def new_password() -> str:
    return "pw-" + secrets.token_urlsafe(18)


def write_credentials(path: Path, username: str, password: str, mode: int = 0o600) -> Path:
    path.write_text(json.dumps({"username": username, "password": password}))
    path.chmod(mode)
    return path
