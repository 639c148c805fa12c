"""A hostile OCI registry on 127.0.0.1, written for the tests: it cannot be a real registry, since
no real one misbehaves on demand. It serves one small, well-formed image tree (an index tagged `v1`,
one linux/amd64 image manifest, its config with servebuild's labels, referrers) and breaks exactly
one thing, chosen by `mode`:

slow-loris-body     the index's body trickles one byte every 0.3 s, for ever
slow-loris-headers  the index's status line arrives, then its headers trickle
never-answers       /v2/ is accepted and never answered
huge-manifest       the index declares 700 MiB and streams them; -undeclared: no Content-Length
huge-blob           the config blob declares 600 MiB and streams them; -undeclared: no Content-Length
wrong-digest        the image manifest fetched by digest is other bytes
wrong-blob          the config blob is other bytes than its digest says
tag-digest-lie      the index by tag comes with a Docker-Content-Digest its bytes do not hash to
redirect-loop       the index redirects to a second URL, which redirects back
redirect-many       the index redirects through 20 distinct URLs
redirect-away       the index redirects to another host (localhost instead of 127.0.0.1)
deep-json           the index is 100,000 nested arrays; deep-json-500: 500
escaping-referrer   the referrers name artifacts whose file names climb out of any folder ('../..')
token-flood         /v2/ asks for a Bearer token; the token service answers 200 MiB
token-deep          the token service answers 100,000 nested arrays
blob-cdn            not hostile: Bearer tokens as GHCR hands out, and the config blob redirected to `cdn`
                    (another host), as Docker Hub and GHCR do
ok                  nothing broken (verify then fails on the missing artifacts, the control case)

`requests` records every (method, path): the tests check that nothing was ever PUT, POSTed or PATCHed.
TLS ClientHellos (the client probes https first) are dropped at once, as a plain-HTTP server would.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
REPO = "servebuild/toy"
SBOM = "application/vnd.cyclonedx+json"


MEASURE = (
    "import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
    "print(f'peak-rss-kib={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}', file=sys.stderr); "
    "sys.exit(p.returncode)"
)


def run_cli(root: Path, args: list[str], cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    """`invoke ARGS` from project `root` as the child of a wrapper that reports the child's peak RSS:
    the result has .seconds, .peak_mib and .lines (stderr without the wrapper's line)."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", MEASURE, sys.executable, "-m", "invoke", "-r", str(root), *args],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    proc.seconds = time.monotonic() - start
    lines = proc.stderr.splitlines()
    proc.peak_mib = int(lines[-1].split("=")[1]) / 1024
    proc.lines = lines[:-1]
    return proc


def write_creds(path: Path) -> Path:
    path.write_text('{"username": "u", "password": "p"}')
    path.chmod(0o600)
    return path


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tree() -> dict:
    config = json.dumps(
        {
            "os": "linux",
            "architecture": "amd64",
            "config": {
                "Labels": {
                    "io.servebuild.manifest.sha256": "0" * 64,
                    "io.servebuild.recipe": "toy",
                    "io.servebuild.recipe.sha256": "1" * 64,
                    "io.servebuild.platform": "linux/amd64",
                }
            },
        }
    ).encode()
    image = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": sha(config),
                "size": len(config),
            },
            "layers": [],
        }
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": sha(image),
                    "size": len(image),
                    "platform": {"os": "linux", "architecture": "amd64"},
                }
            ],
        }
    ).encode()
    sbom = b'{"bomFormat": "CycloneDX"}'
    artifact = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": SBOM,
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha(b"{}"), "size": 2},
            "layers": [
                {
                    "mediaType": SBOM,
                    "digest": sha(sbom),
                    "size": len(sbom),
                    "annotations": {"org.opencontainers.image.title": "../../../escape.json"},
                }
            ],
            "subject": {"mediaType": OCI_MANIFEST, "digest": sha(image), "size": len(image)},
        }
    ).encode()
    return {"config": config, "image": image, "index": index, "sbom": sbom, "artifact": artifact}


class HostileRegistry:
    def __init__(self, mode: str, cdn: str = ""):
        self.mode, self.t, self.requests, self.cdn = mode, tree(), [], cdn  # cdn: where blob-cdn sends the config
        self.authorization = []  # the Authorization header of each GET, in order
        self.stopping = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):
                pass

            def handle(self):
                try:
                    if self.request.recv(1, socket.MSG_PEEK) == b"\x16":  # a TLS ClientHello: not spoken here
                        return
                    super().handle()
                except (BrokenPipeError, ConnectionResetError, socket.timeout):
                    pass

            def do_GET(self):
                outer.requests.append(("GET", self.path))
                outer.authorization.append(self.headers.get("Authorization"))
                outer.answer(self)

            def do_HEAD(self):
                outer.requests.append(("HEAD", self.path))
                outer.answer(self)

            def _refuse(self):
                outer.requests.append((self.command, self.path))
                self.send_response(405)
                self.end_headers()

            do_PUT = do_POST = do_PATCH = do_DELETE = _refuse

        class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.address = f"127.0.0.1:{self.port}"
        self.ref = f"{self.address}/{REPO}:v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def writes(self) -> list:
        return [r for r in self.requests if r[0] not in ("GET", "HEAD")]

    # -- answers -------------------------------------------------------------------------------------
    def send(self, h, code: int, body: bytes = b"", headers: dict | None = None) -> None:
        h.send_response(code)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def stream(self, h, total: int, declared: bool, content_type: str) -> None:
        h.send_response(200)
        h.send_header("Content-Type", content_type)
        if declared:
            h.send_header("Content-Length", str(total))
        h.end_headers()
        chunk, sent = b" " * (1 << 20), 0
        while sent < total and not self.stopping.is_set():
            h.wfile.write(chunk)
            sent += len(chunk)

    def trickle(self, h, data: bytes) -> None:
        for i in range(len(data)):
            if self.stopping.wait(0.3):
                return
            h.wfile.write(data[i : i + 1])
            h.wfile.flush()

    def answer(self, h) -> None:
        mode, t, path = self.mode, self.t, h.path
        base = f"/v2/{REPO}"
        if path == "/v2/":
            if mode == "never-answers":
                self.stopping.wait(600)
                return
            if mode.startswith("token-") or mode == "blob-cdn":
                if h.headers.get("Authorization", "").startswith("Bearer "):
                    return self.send(h, 200, b"{}")
                realm = f"http://{self.address}/token"
                return self.send(h, 401, b"{}", {"WWW-Authenticate": f'Bearer realm="{realm}",service="hostile"'})
            return self.send(h, 200, b"{}")
        if path.startswith("/token"):
            if mode == "blob-cdn":
                return self.send(h, 200, b'{"token": "tkn-for-the-registry"}', {"Content-Type": "application/json"})
            if mode == "token-flood":
                return self.stream(h, 200 << 20, True, "application/json")
            return self.send(h, 200, b"[" * 100_000 + b"]" * 100_000, {"Content-Type": "application/json"})
        if path.startswith(f"{base}/manifests/v1"):
            return self.index(h)
        if path.startswith(f"{base}/hop/"):
            n = int(path.rsplit("/", 1)[1])
            target = f"{base}/hop/{n + 1}" if n < 20 else f"{base}/manifests/v1?final"
            return self.send(h, 302, b"", {"Location": target})
        if path == f"{base}/manifests/{sha(t['image'])}":
            body = t["image"].replace(b'"layers": []', b'"layers": [ ]') if mode == "wrong-digest" else t["image"]
            return self.send(h, 200, body, {"Content-Type": OCI_MANIFEST})
        if path == f"{base}/blobs/{sha(t['config'])}":
            if mode == "blob-cdn":
                return self.send(h, 307, b"", {"Location": f"{self.cdn}/config"})
            if mode == "wrong-blob":
                return self.send(h, 200, t["config"] + b" ")
            if mode.startswith("huge-blob"):
                return self.stream(h, 600 << 20, not mode.endswith("undeclared"), "application/octet-stream")
            return self.send(h, 200, t["config"])
        if path == f"{base}/referrers/{sha(t['image'])}" and mode == "escaping-referrer":
            entries = [
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": sha(t["artifact"]),
                    "size": len(t["artifact"]),
                    "artifactType": SBOM,
                }
            ]
            body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}).encode()
            return self.send(h, 200, body, {"Content-Type": OCI_INDEX})
        if path == f"{base}/manifests/{sha(t['artifact'])}":
            return self.send(h, 200, t["artifact"], {"Content-Type": OCI_MANIFEST})
        if path == f"{base}/blobs/{sha(t['sbom'])}":
            return self.send(h, 200, t["sbom"])
        return self.send(h, 404, b'{"errors": [{"code": "MANIFEST_UNKNOWN"}]}')

    def index(self, h) -> None:
        mode, body = self.mode, self.t["index"]
        headers = {"Content-Type": OCI_INDEX, "Docker-Content-Digest": sha(body)}
        if mode == "slow-loris-body":
            h.send_response(200)
            h.send_header("Content-Type", OCI_INDEX)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.flush()
            return self.trickle(h, body)
        if mode == "slow-loris-headers":
            h.wfile.write(b"HTTP/1.0 200 OK\r\n")
            return self.trickle(h, b"Content-Type: application/json\r\nX-Padding: " + b"a" * 10_000 + b"\r\n\r\n")
        if mode.startswith("huge-manifest"):
            return self.stream(h, 700 << 20, not mode.endswith("undeclared"), OCI_INDEX)
        if mode == "tag-digest-lie":
            headers["Docker-Content-Digest"] = sha(body + b" ")
        if mode == "redirect-loop":
            return self.send(h, 302, b"", {"Location": f"/v2/{REPO}/manifests/v1?" + ("b" if "?a" in h.path else "a")})
        if mode == "redirect-many" and "?final" not in h.path:
            return self.send(h, 302, b"", {"Location": f"/v2/{REPO}/hop/0"})
        if mode == "redirect-away":
            return self.send(h, 302, b"", {"Location": f"http://localhost:{self.port}/v2/{REPO}/manifests/v1"})
        if mode.startswith("deep-json"):
            depth = 500 if mode.endswith("500") else 100_000
            body = b"[" * depth + b"]" * depth
            headers["Docker-Content-Digest"] = sha(body)
        self.send(h, 200, body, headers)
