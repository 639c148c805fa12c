"""rebuild --check against a registry served over HTTP by the test (LayerRegistry: a fake registry in
pure Python, since no real registry trickles, floods or lies on demand), read through the real
RegistryClient: the bounds on a layer (inflated bytes, the registry deadline per request, the total
deadline of the command's registry reads), what is refused before any layer blob is asked for, and
the behaviours of issue 31 point 10 that no test held. The engine's part (the build) is replaced by
`fake_build`, which returns the config the test chooses; nothing here needs docker.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import socket
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

import pytest

from servebuild.errors import InputError, IntegrityError
from servebuild.registry.client import RegistryClient, RegistryError, RegistryTimeout
from servebuild.release import rebuild as rebuilding
from support import REPO_ROOT

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
            put(zeros[:min(len(zeros), inflated - start)])
        put(bytes(-inflated % 512 + 1024))  # the padding to a block and the two empty end blocks
    return out.getvalue(), "sha256:" + diff.hexdigest()


def labels(recipe: str = RECIPE, variant: Optional[str] = None) -> dict:
    out = {"io.servebuild.manifest.sha256": "0" * 64, "io.servebuild.recipe": recipe,
           "io.servebuild.platform": "linux/amd64"}
    if variant is not None:
        out["io.servebuild.variant"] = variant
    return out


class LayerRegistry:
    """A plain-HTTP registry on 127.0.0.1 serving one image under REPO:v1: an index with `entries`
    linux/amd64 entries (0: the tag names the image manifest itself), the image manifest, its config
    (with `labels` and `diff_ids`, by default the layers' true ones) and the layer blobs. The blobs in
    `trickle` are sent one byte every `trickle_s` seconds. `gets` lists every GET path, in order."""

    def __init__(self, layers: list[tuple[bytes, str]], labels: dict, diff_ids: Optional[list[str]] = None,
                 entries: int = 1, trickle: tuple[int, ...] = (), trickle_s: float = 0.05):
        self.gets: list[str] = []
        self.stopping = threading.Event()
        self.blobs = [blob for blob, _ in layers]
        self.config = json.dumps({"os": "linux", "architecture": "amd64", "config": {"Labels": labels},
                                  "rootfs": {"type": "layers", "diff_ids": diff_ids if diff_ids is not None
                                             else [d for _, d in layers]}}, sort_keys=True).encode()
        self.image = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                                 "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                            "digest": sha(self.config), "size": len(self.config)},
                                 "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                             "digest": sha(b), "size": len(b)} for b in self.blobs]}).encode()
        # a second entry for the same platform names another image manifest (here: one more space)
        images = [self.image] + [self.image + b" " * i for i in range(1, entries)]
        self.manifests = {sha(m): m for m in images}
        self.index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": sha(m), "size": len(m),
             "platform": {"os": "linux", "architecture": "amd64"}} for m in images]}).encode()
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
                    h.wfile.write(blob[i:i + 1])
                    h.wfile.flush()
                return
        self.send(h, 404, b'{"errors": [{"code": "BLOB_UNKNOWN"}]}', "application/json")


@pytest.fixture
def registry():
    started = []

    def start(*args, **kwargs) -> LayerRegistry:
        started.append(LayerRegistry(*args, **kwargs))
        return started[-1]
    yield start
    for r in started:
        r.stop()


class Built:
    """What the faked build returns: the rebuilt image's config, and its id (the config's digest)."""

    def __init__(self):
        self.config: Optional[dict] = None
        self.calls = 0


@pytest.fixture
def fake_build(monkeypatch):
    """The engine's part of rebuild --check replaced: `rebuild` returns the test's config (and counts
    its calls); `_saved_layer` finds no rebuilt layer tar (the paths are not listed)."""
    built = Built()

    def rebuild(*args, **kwargs):
        built.calls += 1
        if built.config is None:
            raise AssertionError("rebuild --check went on to the build")
        data = json.dumps(built.config, sort_keys=True).encode()
        return sha(data), built.config
    monkeypatch.setattr(rebuilding, "rebuild", rebuild)
    monkeypatch.setattr(rebuilding, "_saved_layer", lambda *args: None)
    return built


def check(reg: LayerRegistry):
    client = RegistryClient(reg.address)
    return rebuilding.check(REPO_ROOT, client, REPO, "v1", "linux/amd64", docker=None, echo=False)


def one_line(err) -> str:
    message = str(err.value)
    assert "\n" not in message and err.value.exit_code == 2, message
    return message


# -- (issue 31, point 4) the inflated bytes of a layer are bounded ------------------------------------

def test_the_inflated_bound_is_a_hundred_times_the_blob_with_a_64_mib_floor():
    from servebuild.registry import limits
    assert rebuilding.inflated_limit(1 << 10) == 64 << 20  # the floor
    assert rebuilding.inflated_limit(10 << 20) == 1000 << 20  # 100 times the blob
    assert rebuilding.inflated_limit(limits.LAYER_BYTES) == limits.LAYER_INFLATED_BYTES  # at most this


def test_uncompressing_a_layer_stops_writing_at_its_limit(tmp_path):
    blob, _ = gzip_bomb(8 << 20)
    (tmp_path / "bomb.blob").write_bytes(blob)
    with pytest.raises(IntegrityError, match=r"layer 0 \(sha256:\w+\) inflates past 1048576 bytes") as err:
        rebuilding._uncompressed(tmp_path / "bomb.blob", tmp_path / "bomb.tar", 1 << 20, f"layer 0 ({sha(blob)})")
    one_line(err)
    assert (tmp_path / "bomb.tar").stat().st_size <= 1 << 20


def test_a_layer_that_inflates_past_its_bound_is_refused_naming_its_digest(registry, fake_build):
    """A gzip bomb served as a layer (about 100 KiB that inflate to 100 MiB, with its true diff_id):
    it was inflated whole to the temp dir (a ~1 MiB one filled a 300 MiB tmpfs). Now the inflation stops
    at the bound (64 MiB here: the floor), one line naming the layer's digest, nothing built."""
    bomb = gzip_bomb(100 << 20)
    reg = registry([bomb], labels())
    with pytest.raises(IntegrityError) as err:
        check(reg)
    message = one_line(err)
    assert f"layer 0 ({sha(bomb[0])})" in message and f"inflates past {64 << 20} bytes" in message, message
    assert fake_build.calls == 0


# -- (issue 31, point 3) every request under the registry deadline; a total for the command -----------

def test_a_layer_trickled_a_byte_at_a_time_ends_at_the_registry_deadline(registry, fake_build, monkeypatch):
    """The layer read had its own 3,600 s (limits.LAYER_S) outside any operation, whatever
    SERVEBUILD_REGISTRY_DEADLINE said; now each layer read is one operation under it."""
    monkeypatch.setenv("SERVEBUILD_REGISTRY_DEADLINE", "1")
    blob = layer({"etc/x": b"x"})
    reg = registry([blob], labels(), trickle=(0,), trickle_s=0.1)  # ~12 s for the whole blob
    start = time.monotonic()
    with pytest.raises(RegistryTimeout) as err:
        check(reg)
    seconds = time.monotonic() - start
    message = one_line(err)
    assert seconds < 4, (seconds, message)
    assert f"layer 0 ({sha(blob[0])})" in message and "did not finish within 1 s" in message, message
    assert fake_build.calls == 0


def test_the_registry_reads_of_one_rebuild_end_at_its_total_deadline(registry, fake_build, monkeypatch):
    """Each layer within SERVEBUILD_REGISTRY_DEADLINE, but many of them: the command's registry reads
    together end at SERVEBUILD_REBUILD_DEADLINE."""
    monkeypatch.setenv("SERVEBUILD_REGISTRY_DEADLINE", "30")
    monkeypatch.setenv("SERVEBUILD_REBUILD_DEADLINE", "2")
    layers = [layer({f"etc/{i}": b"x" * i}) for i in range(4)]
    reg = registry(layers, labels(), trickle=(0, 1, 2, 3), trickle_s=0.01)  # about 1.3 s each
    start = time.monotonic()
    with pytest.raises(RegistryTimeout) as err:
        check(reg)
    seconds = time.monotonic() - start
    message = one_line(err)
    assert seconds < 3.5, (seconds, message)
    assert "SERVEBUILD_REBUILD_DEADLINE" in message and "did not finish within 2 s" in message, message
    assert 1 <= len(reg.layer_gets()) < 4 and fake_build.calls == 0


@pytest.mark.parametrize("value", ["0", "-1", "nan", "x", "90000"])
def test_a_bad_total_deadline_is_refused_before_the_registry_is_asked(value, monkeypatch):
    from servebuild.cli import release as cli_release
    monkeypatch.setenv("SERVEBUILD_REBUILD_DEADLINE", value)
    with pytest.raises(InputError) as err:  # port 1: nothing listens, and nothing may be asked
        cli_release.rebuild_check(REPO_ROOT, "127.0.0.1:1/servebuild/toy:v1", "linux/amd64")
    assert err.value.field == "SERVEBUILD_REBUILD_DEADLINE", str(err.value)
    one_line(err)


# -- (issue 31, point 6) labels and the plan are checked before any layer blob is asked for -----------

@pytest.mark.parametrize("recipe, variant", [("recipes/hostile-base.yaml", None), ("/etc/hostile.yaml", None),
                                             ("../x", None), (RECIPE, "../x")])
def test_a_hostile_label_fails_before_a_single_layer_blob_get(registry, fake_build, recipe, variant):
    reg = registry([layer({"etc/x": b"x"})], labels(recipe, variant))
    with pytest.raises(InputError, match="label .* is not a (recipe|variant) name") as err:
        check(reg)
    one_line(err)
    assert f"/v2/{REPO}/blobs/{sha(reg.config)}" in reg.gets  # the labels are in the config, read first
    assert reg.layer_gets() == [] and fake_build.calls == 0


@pytest.mark.parametrize("recipe, variant, words", [
    ("no-such-recipe", None, "unknown recipe 'no-such-recipe'"),
    (RECIPE, "no-such-variant", "unknown variant 'no-such-variant'"),
])
def test_a_label_naming_what_this_checkout_cannot_build_fails_before_a_layer_get(registry, fake_build, recipe,
                                                                                   variant, words):
    """A name by the grammar, but no recipe (or variant) of this checkout: every layer was downloaded
    (gigabytes) before the plan was made and refused it; now the plan is made first."""
    reg = registry([layer({"etc/x": b"x"})], labels(recipe, variant))
    with pytest.raises(InputError) as err:
        check(reg)
    message = one_line(err)
    assert words in message and "io.servebuild.recipe" in message, message
    assert reg.layer_gets() == [] and fake_build.calls == 0


# -- (issue 31, point 10) behaviours no test held -----------------------------------------------------

def test_two_images_whose_configs_alone_differ_are_called_different(registry, fake_build):
    reg = registry([layer({"etc/x": b"x"})], labels())
    theirs = json.loads(reg.config)
    fake_build.config = theirs  # the control: the same config, the same id
    report = check(reg)
    assert report.identical and report.rebuilt_id == sha(reg.config), report.difference
    fake_build.config = dict(theirs, config={"Labels": {**labels(), "org.example.extra": "1"}})
    report = check(reg)
    assert not report.identical
    assert report.difference == ["every layer is the same; the config differs: config.Labels"]


@pytest.mark.parametrize("differing", [(0, 1), (1, 2), (2,)])
def test_only_the_first_differing_layer_is_named(registry, fake_build, differing):
    layers = [layer({f"etc/{i}": b"x" * (i + 1)}) for i in range(3)]
    reg = registry(layers, labels())
    theirs = json.loads(reg.config)
    ours = [sha(b"other %d" % i) if i in differing else d for i, (_, d) in enumerate(layers)]
    fake_build.config = dict(theirs, rootfs={"type": "layers", "diff_ids": ours})
    report = check(reg)
    named = [line for line in report.difference if line.startswith("layer ")]
    assert named == [f"layer {differing[0]} (no history) differs: registry {layers[differing[0]][1]}, "
                     f"rebuild {ours[differing[0]]}"], report.difference


def test_an_index_with_two_entries_for_the_platform_is_refused_in_one_line(registry, fake_build):
    reg = registry([layer({"etc/x": b"x"})], labels(), entries=2)
    with pytest.raises(InputError, match="its index lists 2 images for linux/amd64") as err:
        check(reg)
    assert err.value.field == "--platform"
    one_line(err)
    assert not any("/manifests/sha256:" in p for p in reg.gets)  # neither entry is followed
    assert reg.layer_gets() == [] and fake_build.calls == 0


def test_a_layer_matching_its_blob_digest_but_not_its_diff_id_is_an_integrity_error_before_any_build(
        registry, fake_build):
    """The blob hashes to its descriptor; its uncompressed bytes are not the config's diff_id (an image
    not self-consistent). It was a 'difference' found after the whole --no-cache build; now it is an
    IntegrityError before the build."""
    blob = layer({"etc/x": b"x"})
    other = sha(b"not this layer")
    reg = registry([blob], labels(), diff_ids=[other])
    with pytest.raises(IntegrityError) as err:
        check(reg)
    message = one_line(err)
    assert f"layer 0 ({sha(blob[0])})" in message and blob[1] in message and other in message, message
    assert fake_build.calls == 0


class SavedDocker:
    """A docker whose `docker save` stream holds the given members (name -> bytes)."""

    name = "fake-engine"

    def __init__(self, members: dict[str, bytes]):
        self.members = members

    def saved(self, image_id):
        from contextlib import contextmanager

        @contextmanager
        def stream():
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                for name, body in self.members.items():
                    info = tarfile.TarInfo(name)
                    info.size = len(body)
                    tar.addfile(info, io.BytesIO(body))
            buf.seek(0)
            with tarfile.open(fileobj=buf, mode="r|") as tar:
                yield tar
        return stream()


@pytest.mark.parametrize("extra, refused", [(0, False), (1, True)])
def test_a_docker_save_config_is_read_within_its_size_limit(extra, refused):
    """`docker save` of the rebuilt image: its config is read within imageconfig.CONFIG_LIMIT (8 MiB;
    exactly at the limit is read)."""
    from servebuild.build.imageconfig import CONFIG_LIMIT, read_config
    from servebuild.errors import DockerError
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": []}}).encode()
    config += b" " * (CONFIG_LIMIT + extra - len(config))
    docker = SavedDocker({"abc.json": config, "manifest.json": json.dumps([{"Config": "abc.json"}]).encode()})
    if not refused:
        assert read_config(docker, "sha256:abc") == {"rootfs": {"type": "layers", "diff_ids": []}}
        return
    with pytest.raises(DockerError, match=f"holds abc.json of {CONFIG_LIMIT + 1} bytes, over {CONFIG_LIMIT}") as err:
        read_config(docker, "sha256:abc")
    one_line(err)


def _index(entries) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}).encode()


@pytest.mark.parametrize("make, kind, words", [
    (lambda reg: _index(7), RegistryError, "index: manifests is a int, not a list"),
    (lambda reg: _index([{"digest": sha(reg.image), "platform": "linux/amd64"}]), InputError,
     "holds no linux/amd64 image (it lists None/None)"),
    (lambda reg: _index([{"digest": 7, "platform": {"os": "linux", "architecture": "amd64"}}]), RegistryError,
     "its linux/amd64 entry names 7, not a sha256 digest"),
    (lambda reg: reg.image.replace(b'"config": {', b'"config": "x", "c": {'), RegistryError,
     "its config is not a descriptor"),
    (lambda reg: reg.image.replace(b'"layers": [', b'"layers": ["x", '), RegistryError,
     "its layers not a list of descriptors"),
])
def test_an_index_or_manifest_of_the_wrong_shape_is_one_line(registry, fake_build, make, kind, words):
    """A platform that is a string, an entry digest that is a number, a config descriptor that is a
    string: AttributeError tracebacks before (`.get` on a str, `.startswith` on an int); manifests
    that is a number: a TypeError. Now each is one line, exit 2, before any layer is read."""
    reg = registry([layer({"etc/x": b"x"})], labels())
    reg.tagged = make(reg)
    with pytest.raises(kind) as err:
        check(reg)
    message = one_line(err)
    assert words in message, message
    assert reg.layer_gets() == [] and fake_build.calls == 0
