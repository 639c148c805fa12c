"""LayerRegistry: a fake OCI registry in pure Python for `rebuild --check` (plain HTTP on 127.0.0.1),
serving one image with real layers and misbehaving on demand (a trickled layer, a second index
entry for the platform, diff_ids other than the layers', any body under the tag). No real registry
trickles or lies on demand. Used by tests/unit/test_rebuild_registry.py (the build faked) and
tests/integration/test_rebuild.py (the CLI, engine real, stopped before any build).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import socket
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

REPO = "servebuild/toy"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
RECIPE = "torch-cu130-bookworm"  # a recipe of this checkout: the plan is made from it, the build is faked


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer(files: dict[str, bytes]) -> tuple[bytes, str]:
    """(a gzipped layer blob, its diff_id)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, body in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mtime, info.mode = len(body), 946684800, 0o644
            tar.addfile(info, io.BytesIO(body))
    return gzip.compress(buf.getvalue(), mtime=0), sha(buf.getvalue())


def gzip_bomb(inflated: int) -> tuple[bytes, str]:
    """A gzipped layer of one file of `inflated` zero bytes (about 1,000 times smaller), with its true
    diff_id: a well-formed layer, only much larger inflated than its blob."""
    info = tarfile.TarInfo("var/zeros")
    info.size, info.mtime = inflated, 946684800
    diff, out = hashlib.sha256(), io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:

        def put(data: bytes) -> None:
            diff.update(data)
            gz.write(data)

        put(info.tobuf(tarfile.PAX_FORMAT))
        zeros = bytes(1 << 20)
        for start in range(0, inflated, len(zeros)):
            put(zeros[: min(len(zeros), inflated - start)])
        put(bytes(-inflated % 512 + 1024))  # the padding to a block and the two empty end blocks
    return out.getvalue(), "sha256:" + diff.hexdigest()


def labels(recipe: str = RECIPE, variant: Optional[str] = None) -> dict:
    out = {
        "io.servebuild.manifest.sha256": "0" * 64,
        "io.servebuild.recipe": recipe,
        "io.servebuild.platform": "linux/amd64",
    }
    if variant is not None:
        out["io.servebuild.variant"] = variant
    return out


class LayerRegistry:
    """A plain-HTTP registry on 127.0.0.1 serving one image under REPO:v1: an index with `entries`
    linux/amd64 entries (0: the tag names the image manifest itself), the image manifest, its config
    (with `labels` and `diff_ids`, by default the layers' true ones) and the layer blobs. The blobs in
    `trickle` are sent one byte every `trickle_s` seconds. `gets` lists every GET path, in order."""

    def __init__(
        self,
        layers: list[tuple[bytes, str]],
        labels: dict,
        diff_ids: Optional[list[str]] = None,
        entries: int = 1,
        trickle: tuple[int, ...] = (),
        trickle_s: float = 0.05,
    ):
        self.gets: list[str] = []
        self.stopping = threading.Event()
        self.blobs = [blob for blob, _ in layers]
        self.config = json.dumps(
            {
                "os": "linux",
                "architecture": "amd64",
                "config": {"Labels": labels},
                "rootfs": {"type": "layers", "diff_ids": diff_ids if diff_ids is not None else [d for _, d in layers]},
            },
            sort_keys=True,
        ).encode()
        self.image = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": sha(self.config),
                    "size": len(self.config),
                },
                "layers": [
                    {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": sha(b), "size": len(b)}
                    for b in self.blobs
                ],
            }
        ).encode()
        # a second entry for the same platform names another image manifest (here: one more space)
        images = [self.image] + [self.image + b" " * i for i in range(1, entries)]
        self.manifests = {sha(m): m for m in images}
        self.index = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_INDEX,
                "manifests": [
                    {
                        "mediaType": OCI_MANIFEST,
                        "digest": sha(m),
                        "size": len(m),
                        "platform": {"os": "linux", "architecture": "amd64"},
                    }
                    for m in images
                ],
            }
        ).encode()
        self.tagged = self.index if entries else self.image
        self.trickled = {sha(self.blobs[i]) for i in trickle}
        self.trickle_s = trickle_s
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def handle(self):
                try:
                    if self.request.recv(1, socket.MSG_PEEK) == b"\x16":  # the client's https probe
                        return
                    super().handle()
                except (BrokenPipeError, ConnectionResetError, socket.timeout):
                    pass

            def do_GET(self):
                outer.gets.append(self.path)
                outer.answer(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def layer_gets(self) -> list[str]:
        return [p for p in self.gets if p.rsplit("/", 1)[-1] in {sha(b) for b in self.blobs}]

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def send(self, h, code: int, body: bytes, content_type: str = "application/octet-stream") -> None:
        h.send_response(code)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def answer(self, h) -> None:
        base, path = f"/v2/{REPO}", h.path
        if path == "/v2/":
            return self.send(h, 200, b"{}", "application/json")
        if path == f"{base}/manifests/v1":
            return self.send(h, 200, self.tagged, json.loads(self.tagged)["mediaType"])
        if path.startswith(f"{base}/manifests/") and path.rsplit("/", 1)[1] in self.manifests:
            return self.send(h, 200, self.manifests[path.rsplit("/", 1)[1]], OCI_MANIFEST)
        digest = path.rsplit("/", 1)[1]
        if path == f"{base}/blobs/{sha(self.config)}":
            return self.send(h, 200, self.config)
        for blob in self.blobs:
            if path == f"{base}/blobs/{sha(blob)}":
                if digest not in self.trickled:
                    return self.send(h, 200, blob)
                h.send_response(200)
                h.send_header("Content-Length", str(len(blob)))
                h.end_headers()
                h.wfile.flush()
                for i in range(len(blob)):
                    if self.stopping.wait(self.trickle_s):
                        return
                    h.wfile.write(blob[i : i + 1])
                    h.wfile.flush()
                return
        self.send(h, 404, b'{"errors": [{"code": "BLOB_UNKNOWN"}]}', "application/json")
