"""Two Docker engines on this machine acting as a build farm, through `invoke build --farm`.

Node 1 is the machine's engine (unix:///var/run/docker.sock). Node 2 is a second dockerd this
test starts with its own data root, exec root, pidfile, unix socket and a TCP endpoint with
mutual TLS (certificates made here with trustme). Node 2 has a bridge of its own and no iptables
rules (`--bridge=sbn2N --iptables=false`: a second daemon must not touch the first one's docker0,
which `--bridge=none` deletes, or its iptables chains), so its farm entry says `network: host`
and its builds' RUN steps use the host network.
Its base images are copied from node 1 with `docker save | docker load`. Nothing is faked.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import pytest
from invoke import Context, Exit

import tasks
from integration.conftest import HOST_CA
from support import free_port, make_project, start_registry

DOCKER = "/usr/bin/docker"
BASES = ("servebuild/debian:bookworm-amd64", "servebuild/debian:bookworm-arm64")
TAGS = "servebuild-test/farm-toy:{arch}"
CACHE_REF = "{address}/servebuild-cache/toy:{arch}"


class SecondEngine:
    """A second dockerd, started and torn down by this test (every process it leaves is ours: its
    command line names this test's own temp dir)."""

    def __init__(self):
        # a short path: a unix socket path must stay under 108 bytes
        self.dir = Path(tempfile.mkdtemp(prefix="sbnode2.", dir="/tmp"))
        self.sock = self.dir / "docker.sock"
        self.port = free_port()
        self.certs = self.dir / "certs"
        self.proc = None
        self._make_certs()

    def _make_certs(self):
        import trustme

        ca = trustme.CA()
        self.certs.mkdir()
        ca.cert_pem.write_to_path(str(self.certs / "ca.pem"))
        server = ca.issue_cert("127.0.0.1", "localhost")
        server.cert_chain_pems[0].write_to_path(str(self.certs / "server-cert.pem"))
        server.private_key_pem.write_to_path(str(self.certs / "server-key.pem"))
        # names the 20.10 client does not look for: the client links them into a private dir
        client = ca.issue_cert("servebuild-client.test")
        client.cert_chain_pems[0].write_to_path(str(self.certs / "client-cert.pem"))
        client.private_key_pem.write_to_path(str(self.certs / "client-key.pem"))
        os.chmod(self.certs / "client-key.pem", 0o600)
        os.chmod(self.certs / "server-key.pem", 0o600)
        self.client_key = (self.certs / "client-key.pem").read_text()
        # what a leak would carry: the key's longest base64 line (PEM headers are not secret)
        self.key_secret = max(self.client_key.splitlines(), key=len).encode()

    @property
    def tcp(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def start(self) -> None:
        c = self.certs
        # its own bridge: with --bridge=none dockerd deletes the host's docker0 (the first
        # engine's default network) on startup, which broke every build of the first engine
        self.bridge = f"sbn2{os.getpid() % 100000}"
        subprocess.run(["ip", "link", "add", self.bridge, "type", "bridge"], capture_output=True)
        subprocess.run(
            ["ip", "addr", "add", f"10.213.{os.getpid() % 250}.1/24", "dev", self.bridge], capture_output=True
        )
        subprocess.run(["ip", "link", "set", self.bridge, "up"], capture_output=True)
        log = (self.dir / "dockerd.log").open("a")
        # no BuildKit garbage collection: by default it keeps the build cache under about 10 % of the disk, so
        # on a small disk it could drop the records the engine-image test proves a variant reuses (a
        # precaution: CI's profile-check failure had another cause; the tests prune what they made)
        config = self.dir / "daemon.json"
        config.write_text(json.dumps({"builder": {"gc": {"enabled": False}}}))
        self.proc = subprocess.Popen(
            [
                "dockerd",
                "--config-file",
                str(config),
                "--data-root",
                str(self.dir / "data"),
                "--exec-root",
                str(self.dir / "exec"),
                "--pidfile",
                str(self.dir / "docker.pid"),
                "-H",
                f"unix://{self.sock}",
                "-H",
                self.tcp,
                "--tlsverify",
                "--tlscacert",
                str(c / "ca.pem"),
                "--tlscert",
                str(c / "server-cert.pem"),
                "--tlskey",
                str(c / "server-key.pem"),
                f"--bridge={self.bridge}",
                "--iptables=false",
                "--ip-masq=false",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"second dockerd exited {self.proc.returncode}: {(self.dir / 'dockerd.log').read_text()[-2000:]}"
                )
            if self.docker("version", check=False).returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError("second dockerd did not answer within 60 s")

    def load(self, *refs: str) -> None:
        """Images of the first engine copied here (docker save | docker load)."""
        save = subprocess.Popen([DOCKER, "save", *refs], stdout=subprocess.PIPE)
        self.docker("load", stdin=save.stdout)
        if save.wait() != 0:
            raise RuntimeError(f"docker save {' '.join(refs)} failed on the first engine")

    def docker(self, *args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
        return subprocess.run(
            [DOCKER, "-H", f"unix://{self.sock}", *args], env=env, check=check, capture_output=True, text=True, **kw
        )

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.proc = None
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True)
        for pid in self._leftover_pids():  # its containerd and shims, had dockerd died hard
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _leftover_pids(self) -> list[int]:
        mine = str(self.dir).encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if mine in (entry / "cmdline").read_bytes():
                        pids.append(int(entry.name))
                except OSError:
                    pass
        return pids

    def remove(self) -> None:
        self.stop()
        prefix = str(self.dir) + "/"
        with open("/proc/self/mountinfo") as fh:
            mounts = [line.split()[4] for line in fh]
        for point in reversed([m for m in mounts if m.startswith(prefix)]):
            subprocess.run(["umount", "-l", point], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def node2(base_images):
    node = SecondEngine()
    try:
        node.start()
        node.load(*BASES)
        yield node
    finally:
        node.remove()


@pytest.fixture(scope="module")
def cache_registry(tmp_path_factory):
    """A real registry on 127.0.0.1, plain HTTP (dockerd 20.10's BuildKit reaches loopback only so)."""
    address, proc = start_registry(tmp_path_factory.mktemp("farm-registry"))
    yield address
    proc.kill()
    proc.wait()
    for arch in ("amd64", "arm64"):  # the local tags a push leaves on node 1
        subprocess.run([DOCKER, "image", "rm", CACHE_REF.format(address=address, arch=arch)], capture_output=True)


@pytest.fixture(scope="module")
def farm_project(tmp_path_factory, upstream) -> Path:
    """The fixture recipe in a project of its own (its build/ is not the other tests')."""
    return make_project(tmp_path_factory.mktemp("farm"), upstream)


@pytest.fixture(autouse=True)
def _ca(monkeypatch, farm_project):
    monkeypatch.setattr(tasks, "ROOT", farm_project)
    if HOST_CA.exists():
        monkeypatch.setenv("SERVEBUILD_CA_BUNDLE", str(HOST_CA))
        # a host-wide bundle without the farm's private CA, as many sites set it: the engine client's
        # TLS to node 2 must trust the farm file's CA, not this (requests would read it by default)
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(HOST_CA))


@pytest.fixture(scope="module", autouse=True)
def _remove_our_tags():
    yield
    for arch in ("amd64", "arm64"):
        for tag in (TAGS, "servebuild-test/farm-down:{arch}", "servebuild-test/farm-cache:{arch}"):
            subprocess.run([DOCKER, "image", "rm", "-f", tag.replace("{arch}", arch)], capture_output=True)


def write_farm(root: Path, text: str) -> Path:
    path = root / "farm-test.yaml"
    path.write_text(text)
    return path


def tls_entry(node: SecondEngine) -> str:
    c = node.certs
    return (
        f"    - host: {node.tcp}\n"
        f"      tls: {{ca: {c / 'ca.pem'}, cert: {c / 'client-cert.pem'}, key: {c / 'client-key.pem'}}}\n"
        f"      network: host\n"
    )


def build(farm: Path, capsys, **options) -> tuple[str, str]:
    tasks.build(Context(), recipe="toy", farm=str(farm), **options)
    out = capsys.readouterr()
    return out.out, out.err


def image_arch(run, ref: str) -> str:
    return run("image", "inspect", "--format", "{{.Architecture}}", ref).stdout.strip()


def node1(*args, check=True):
    return subprocess.run([DOCKER, *args], check=check, capture_output=True, text=True)


def test_two_nodes_build_two_platforms_concurrently(node2, farm_project, cache_registry, capsys, monkeypatch):
    """amd64 on node 1 (unix socket), arm64 on node 2 (TCP + mutual TLS), both at once (the real
    run.build, timed by a wrapper, shows the two builds overlap); each pushes its inline
    cache to the registry (node 1 builds with the host network too, so the cache keys of its RUN
    steps are the ones node 2 computes)."""
    from servebuild.build import run

    spans, real_build = {}, run.build

    def timed(plan, docker, echo=None):
        begin = time.monotonic()
        try:
            return real_build(plan, docker, echo=echo)
        finally:
            spans[plan.platform] = (begin, time.monotonic())

    monkeypatch.setattr(run, "build", timed)
    farm = write_farm(
        farm_project,
        "platforms:\n  linux/amd64:\n    - host: unix:///var/run/docker.sock\n"
        "      network: host\n  linux/arm64:\n" + tls_entry(node2),
    )
    start = time.monotonic()
    out, err = build(
        farm,
        capsys,
        platform="linux/amd64,linux/arm64",
        tag=TAGS,
        cache_to=CACHE_REF.format(address=cache_registry, arch="{arch}"),
    )
    took = time.monotonic() - start
    amd, arm = TAGS.replace("{arch}", "amd64"), TAGS.replace("{arch}", "arm64")
    assert f"built {amd} (" in out and "for linux/amd64 on unix:///var/run/docker.sock" in out
    assert f"built {arm} (" in out and f"for linux/arm64 on {node2.tcp}" in out
    for arch in ("amd64", "arm64"):
        assert f"cache:    {CACHE_REF.format(address=cache_registry, arch=arch)} (inline BuildKit cache)" in out
    # each image is on its node only, of its architecture
    assert image_arch(node1, amd) == "amd64" and image_arch(node2.docker, arm) == "arm64"
    assert node1("image", "inspect", arm, check=False).returncode != 0
    assert node2.docker("image", "inspect", amd, check=False).returncode != 0
    # the two builds overlapped in time; both logs streamed, each line prefixed with its platform
    (amd_start, amd_end), (arm_start, arm_end) = spans["linux/amd64"], spans["linux/arm64"]
    assert arm_start < amd_end and amd_start < arm_end
    lines = err.splitlines()
    for platform in ("linux/amd64", "linux/arm64"):
        assert any(re.match(rf"\[{platform}\] \[ *\d+s\] #\d+ ", line) for line in lines), platform
    assert all(line.startswith(("[linux/amd64] ", "[linux/arm64] ")) for line in lines), lines[:3]
    for platform, engine_run, ref in (("linux/amd64", node1, amd), ("linux/arm64", node2.docker, arm)):
        build_dir = farm_project / "build" / "toy" / platform.replace("/", "-")
        manifest = json.loads((build_dir / "manifest.json").read_text())
        assert manifest["platform"] == platform
        assert (
            manifest["outputs"]["image_id"] == engine_run("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()
        )
        assert manifest["outputs"]["engine"]["host"] == (
            "unix:///var/run/docker.sock" if engine_run is node1 else node2.tcp
        )
        inside = json.loads(
            engine_run(
                "run",
                "--rm",
                "--network",
                "none",
                "--platform",
                platform,
                "--entrypoint",
                "cat",
                ref,
                "/opt/servebuild/manifest.json",
            ).stdout
        )
        assert inside == {k: v for k, v in manifest.items() if k != "outputs"}
        log = (build_dir / "build.log").read_text()
        assert "writing image sha256:" in log
    # the TLS client key reaches no output, no file under build/ and no layer of either image
    assert node2.key_secret.decode() not in out + err
    for path in (farm_project / "build").rglob("*"):
        if path.is_file():
            assert node2.key_secret not in path.read_bytes(), path
    for sock, ref in ((None, amd), (node2.sock, arm)):
        assert _stream_has(sock, ref, b'GREETING = "hello, hopper"')  # the scan sees layer contents
        assert not _stream_has(sock, ref, node2.key_secret), ref
    with capsys.disabled():
        print(f"\nfarm build, amd64 on node 1 + arm64 (QEMU) on node 2 concurrently: {took:.1f}s")


def test_one_recipe_gives_one_image_on_two_engines(node2, farm_project, cache_registry, capsys, tmp_path, monkeypatch):
    """Bit for bit across engines (issue 20): node 2 (its own data root, socket, bridge, and an empty
    build cache for amd64) builds the amd64 image node 1 built in the test above, with --no-cache and
    this process's umask at 077 (node 1 built under the usual 022), and gets the same image id: every
    layer and the config (created times from the inputs). Node 1's engine has built this recipe before
    (its cache holds other paths to the same results) and node 2's has not: the image's config carries
    no inline cache, whose records are that history; each cache ref carries it, over the same layers."""
    amd = TAGS.replace("{arch}", "amd64")
    want = node1("image", "inspect", "--format", "{{.Id}}", amd, check=False).stdout.strip()
    assert want, "run with the two-node build test (node 1 builds amd64 there)"
    assert node2.docker("image", "inspect", amd, check=False).returncode != 0  # node 2 never built it
    # a copy of the project: its build/ stays the other tests' (they read which node built amd64 there)
    project = tmp_path / "project"
    shutil.copytree(farm_project, project, ignore=shutil.ignore_patterns("build", "farm-*.yaml"))
    monkeypatch.setattr(tasks, "ROOT", project)
    farm = project / "farm-node2.yaml"
    farm.write_text("platforms:\n  linux/amd64:\n" + tls_entry(node2))
    old = os.umask(0o077)
    try:
        build(
            farm,
            capsys,
            platform="linux/amd64",
            tag=amd,
            no_cache=True,
            cache_to=CACHE_REF.format(address=cache_registry, arch="node2-amd64"),
        )
    finally:
        os.umask(old)
    got = node2.docker("image", "inspect", "--format", "{{.Id}}", amd).stdout.strip()
    layers = [
        json.loads(run("image", "inspect", "--format", "{{json .RootFS.Layers}}", amd).stdout)
        for run in (node1, node2.docker)
    ]
    assert layers[0] == layers[1]
    assert got == want, _config_diff(_saved_config(None, amd), _saved_config(node2.sock, amd))
    for sock, arch in ((None, "amd64"), (node2.sock, "node2-amd64")):
        image, carrier = (
            _saved_config(sock, amd),
            _saved_config(sock, CACHE_REF.format(address=cache_registry, arch=arch)),
        )
        assert "moby.buildkit.cache.v0" not in image
        assert carrier.pop("moby.buildkit.cache.v0")  # the cache's records, the only difference
        assert carrier == image


def test_two_node_builds_are_smoke_tested_and_published_under_one_tag(node2, farm_project, tmp_path):
    """After the two-node build above: each platform's smoke suite runs on the node that built it,
    `invoke publish --farm` pushes each from its node to a registry with TLS (private CA) and
    htpasswd, and the tag's index holds exactly the two smoke-passed digests; `docker pull
    --platform` of each resolves to the image that passed."""
    from registry_support import TLSRegistry, new_password, write_credentials

    farm = farm_project / "farm-test.yaml"
    assert farm.exists(), "run with the two-node build test (it writes the farm file and builds)"
    passed = {}
    for platform in ("linux/amd64", "linux/arm64"):
        tasks.test_image(Context(), recipe="toy", platform=platform, farm=str(farm))  # Exit when it fails
        verdict = json.loads(
            (farm_project / "build" / "toy" / platform.replace("/", "-") / "smoke" / "verdict.json").read_text()
        )
        assert verdict["passed"], platform
        passed[platform] = verdict["image_id"]
    password = new_password()
    reg = TLSRegistry(tmp_path / "registry", users={"farm": password})
    creds = write_credentials(tmp_path / "creds.json", "farm", password)
    try:
        tasks.publish(
            Context(),
            recipe="toy",
            registry=reg.address,
            platform="linux/amd64,linux/arm64",
            repository="servebuild-test/farm",
            tag="v1",
            credentials=str(creds),
            ca=str(reg.ca_file),
            farm=str(farm),
        )
        code, body = reg.manifest("servebuild-test/farm", "v1")
        assert code == 200
        index = json.loads(body)
        by_platform = {
            f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"] for m in index["manifests"]
        }
        assert sorted(by_platform) == ["linux/amd64", "linux/arm64"] and len(index["manifests"]) == 2
        for platform, digest in by_platform.items():
            code, child = reg.manifest("servebuild-test/farm", digest)
            assert json.loads(child)["config"]["digest"] == passed[platform], platform
        config = tmp_path / "docker-config"
        config.mkdir()
        auth = __import__("base64").b64encode(f"farm:{password}".encode()).decode()
        (config / "config.json").write_text(json.dumps({"auths": {reg.address: {"auth": auth}}}))
        ref = f"{reg.address}/servebuild-test/farm:v1"
        for platform in ("linux/amd64", "linux/arm64"):
            pull = subprocess.run(
                [DOCKER, "--config", str(config), "pull", "--platform", platform, ref], capture_output=True, text=True
            )
            assert pull.returncode == 0, pull.stderr
            assert node1("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip() == passed[platform]
            node1("image", "rm", ref, check=False)
        assert password not in (farm_project / "build").joinpath("toy", "linux-arm64", "manifest.json").read_text()
    finally:
        reg.stop()


def _save(sock, ref: str) -> list[str]:
    """`docker save REF` on the engine at `sock` (None: node 1)."""
    return [DOCKER, *(["-H", f"unix://{sock}"] if sock else []), "save", ref]


def _env(sock) -> dict:
    """This process's environment, without DOCKER_* where another engine than node 1 is asked."""
    return {k: v for k, v in os.environ.items() if not (sock and k.startswith("DOCKER_"))}


def _stream_has(sock, ref: str, needle: bytes) -> bool:
    """Whether `docker save REF` (every layer, uncompressed, and the config) on the engine at `sock`
    (None: node 1) holds `needle`."""
    proc = subprocess.Popen(_save(sock, ref), stdout=subprocess.PIPE, env=_env(sock))
    tail, found = b"", False
    for block in iter(lambda: proc.stdout.read(1 << 20), b""):
        if needle in tail + block:
            found = True
        tail = block[-len(needle) :]
    assert proc.wait() == 0
    return found


def _saved_config(sock, ref: str) -> dict:
    """The raw config of REF from `docker save` on the engine at `sock` (None: node 1), its inline cache decoded."""
    saved = subprocess.run(_save(sock, ref), check=True, capture_output=True, env=_env(sock)).stdout
    with tarfile.open(fileobj=io.BytesIO(saved)) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        config = json.load(tar.extractfile(manifest[0]["Config"]))
    if isinstance(config.get("moby.buildkit.cache.v0"), str):
        config["moby.buildkit.cache.v0"] = json.loads(base64.b64decode(config["moby.buildkit.cache.v0"]))
    return config


def _config_diff(a: dict, b: dict) -> str:
    """The keys where two configs differ, each side's value shown (for a failing bit-for-bit assert)."""
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return "configs differ in " + "; ".join(f"{k}: node 1 {a.get(k)!r} / node 2 {b.get(k)!r}" for k in keys)


def _deps_steps(log: str) -> dict[str, bool]:
    """`[deps N/M] RUN ...` steps of a plain BuildKit log -> whether each was CACHED."""
    headers = {m.group(1): m.group(2) for m in re.finditer(r"^#(\d+) (\[deps [^\]]*\] RUN .*)$", log, re.M)}
    return {text: bool(re.search(rf"^#{n} CACHED$", log, re.M)) for n, text in headers.items()}


def test_registry_cache_reaches_an_empty_node(node2, farm_project, cache_registry, capsys):
    """Node 2, its build cache emptied, builds the amd64 fixture cold, then (emptied again) from the
    inline cache node 1 pushed in the test above: the deps steps are CACHED."""
    import urllib.request

    pushed = CACHE_REF.format(address=cache_registry, arch="amd64")
    request = urllib.request.Request(
        f"http://{cache_registry}/v2/servebuild-cache/toy/manifests/amd64",
        method="HEAD",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    assert urllib.request.urlopen(request, timeout=10).status == 200, "node 1 pushed no cache (see the test above)"
    on_node2 = write_farm(
        farm_project, f"platforms:\n  linux/amd64:\n    - host: unix://{node2.sock}\n      network: host\n"
    )
    tag = "servebuild-test/farm-cache:{arch}"
    log_path = farm_project / "build" / "toy" / "linux-amd64" / "build.log"

    def empty_node2():
        node2.docker("image", "rm", "-f", tag.replace("{arch}", "amd64"), check=False)
        node2.docker("builder", "prune", "-af")  # node 2 is this test's own engine

    empty_node2()
    start = time.monotonic()
    build(on_node2, capsys, platform="linux/amd64", tag=tag)
    cold = time.monotonic() - start
    steps = _deps_steps(log_path.read_text())
    assert steps and not any(steps.values()), steps
    empty_node2()
    start = time.monotonic()
    build(on_node2, capsys, platform="linux/amd64", tag=tag, cache_from=[pushed])
    warm = time.monotonic() - start
    steps = _deps_steps(log_path.read_text())
    assert steps and all(steps.values()), steps
    with capsys.disabled():
        print(
            f"\nregistry cache, fixture amd64 on node 2 with an empty build cache: cold {cold:.1f}s, "
            f"from node 1's inline cache {warm:.1f}s"
        )


def test_stopped_node_is_one_line_and_nothing_is_tagged(node2, farm_project, capsys):
    farm = write_farm(
        farm_project,
        "platforms:\n  linux/amd64:\n    - host: unix:///var/run/docker.sock\n  linux/arm64:\n" + tls_entry(node2),
    )
    node2.stop()
    log = farm_project / "build" / "toy" / "linux-amd64" / "build.log"
    before = log.stat().st_mtime_ns if log.exists() else None
    with pytest.raises(Exit) as info:
        build(farm, capsys, platform="linux/amd64,linux/arm64", tag="servebuild-test/farm-down:{arch}")
    message = info.value.message
    assert info.value.code == 2 and "\n" not in message
    assert message.startswith(
        f"error: farm-test.yaml:5: platforms.linux/arm64.0: engine {node2.tcp} not reachable: "
    ), message
    assert node1("image", "inspect", "servebuild-test/farm-down:amd64", check=False).returncode != 0
    assert (log.stat().st_mtime_ns if log.exists() else None) == before  # nothing built on node 1 either
    assert node2.client_key not in message
