"""Publishing: one multi-arch tag on a real TLS + htpasswd registry, provenance beside it, `invoke verify`.

Real things: Debian's docker-registry (distribution 2.8) with a private CA made here (trustme) and
basic auth, the local dockerd (it trusts the CA through /etc/docker/certs.d/127.0.0.1:PORT/ca.crt,
installed for the module and removed after), the fixture recipe built for linux/amd64 and linux/arm64
(QEMU) and proven by the real smoke suite, and the real CLI (`invoke publish`, `invoke verify`) run
from the fixture project (a copy of tasks.py over this checkout's servebuild).
Not real: nothing is faked but one registry client that lies about a pushed manifest's config
(test_publish_refuses_a_manifest_whose_config_is_not_the_built_image says why); the registry has no
client-certificate auth, so the "TLS private keys" of the secret scan are the registry's server key
and the CA's key (and the provenance signing key, an ECDSA P-256 key made here: the reference publish
signs with it).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from hostile_registry import HostileRegistry, run_cli, write_creds
from registry_support import TLSRegistry, new_password, write_credentials
from servebuild.check import smoke
from servebuild.release.credentials import Credentials
from servebuild.errors import ServebuildError, SmokeError
from servebuild.recipe.load import load_recipe
from servebuild.release.publish import PlatformBuild, check_build, publish, verify_smoke
from servebuild.registry.client import OCI_INDEX, RegistryClient, canonical_bytes, referrers_tag
from servebuild.release import provenance
from servebuild.release import signing
from support import REPO_ROOT

DOCKER = "/usr/bin/docker"
REPO = "servebuild/toy"
PLATFORMS = ("linux/amd64", "linux/arm64")
USER = "alice"


@pytest.fixture(scope="module")
def smoked(engine, fixture_images, project):
    """Both fixture platforms with a passing verdict from the real smoke suite; the CLI installed in the project."""
    loaded = load_recipe("toy", project)
    out = {}
    for platform, result in fixture_images.items():
        build_dir = result.manifest_path.parent
        # the build dir's manifest names the image its tag holds now (the fixture builds cold, then warm)
        image_id = json.loads(result.manifest_path.read_text())["outputs"]["image_id"]
        verdict = build_dir / "smoke" / "verdict.json"
        current = json.loads(verdict.read_text()) if verdict.exists() else {}
        if current.get("image_id") != image_id or current.get("passed") is not True:
            assert smoke.test_image(engine, image_id, loaded, build_dir / "smoke") == 0, platform
        out[platform] = SimpleNamespace(manifest_path=result.manifest_path, image_id=image_id, tag=result.tag)
    shutil.copyfile(REPO_ROOT / "tasks.py", project / "tasks.py")
    return out


@pytest.fixture(scope="module")
def reg(tmp_path_factory):
    password = new_password()
    registry = TLSRegistry(tmp_path_factory.mktemp("tls-registry"), {USER: password})
    registry.password = password
    yield registry
    registry.stop()


@pytest.fixture(scope="module")
def creds(reg, tmp_path_factory):
    return write_credentials(tmp_path_factory.mktemp("creds") / "registry.json", USER, reg.password)


@pytest.fixture(scope="module")
def empty_docker_config(tmp_path_factory):
    return tmp_path_factory.mktemp("docker-config-empty")


@pytest.fixture(scope="module")
def sign_keys(tmp_path_factory):
    """Provenance signing keys: `ecdsa` (P-256) signs the reference publish; `other` (Ed25519) is a stranger."""
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    folder = tmp_path_factory.mktemp("sign-keys")
    keys = {}
    for name, key in (
        ("ecdsa", ec.generate_private_key(ec.SECP256R1())),
        ("other", ed25519.Ed25519PrivateKey.generate()),
    ):
        private, public = folder / f"{name}.key", folder / f"{name}.pub"
        pem = key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption())
        private.write_bytes(pem)
        private.chmod(0o600)
        public.write_bytes(key.public_key().public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo))
        der = key.private_bytes(ser.Encoding.DER, ser.PrivateFormat.PKCS8, ser.NoEncryption())
        raw = (
            key.private_numbers().private_value.to_bytes(32, "big")
            if name == "ecdsa"
            else key.private_bytes(ser.Encoding.Raw, ser.PrivateFormat.Raw, ser.NoEncryption())
        )
        keys[name] = SimpleNamespace(
            private=private,
            public=public,
            signer=signing.load_private_key(private),
            secrets=_pem_body(pem)
            + [der, base64.b64encode(der)[:40], raw, raw.hex().encode(), base64.b64encode(raw)[:40]],
        )
        keys[name].keyid = keys[name].signer.keyid
    return keys


def cli(project, *args, docker_config=None, timeout=900, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k != "SERVEBUILD_SIGN_KEY"}  # only where a test sets it
    env.update({"PYTHONPATH": str(REPO_ROOT), "DOCKER_CONFIG": str(docker_config), **(env_extra or {})})
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "-r", str(project), *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    proc.seconds = time.monotonic() - start
    return proc


def publish_args(reg, creds, tag, platforms="linux/amd64,linux/arm64", *extra):
    return [
        "publish",
        "--recipe",
        "toy",
        "--registry",
        reg.address,
        "--platform",
        platforms,
        "--tag",
        tag,
        "--credentials",
        str(creds),
        "--ca",
        str(reg.ca_file),
        *extra,
    ]


def docker_config_with(reg, tmp_path) -> Path:
    folder = tmp_path / "docker-config"
    folder.mkdir(exist_ok=True)
    auth = base64.b64encode(f"{USER}:{reg.password}".encode()).decode()
    (folder / "config.json").write_text(json.dumps({"auths": {reg.address: {"auth": auth}}}))
    (folder / "config.json").chmod(0o600)
    return folder


def index_of(reg, tag) -> tuple[dict, str]:
    import hashlib

    code, body = reg.manifest(REPO, tag)
    assert code == 200, (code, body)
    return json.loads(body), "sha256:" + hashlib.sha256(body).hexdigest()


def platforms_of(index: dict) -> dict[str, str]:
    return {f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"] for m in index["manifests"]}


def client_for(reg) -> RegistryClient:
    return RegistryClient(reg.address, Credentials(USER, reg.password, "test"), reg.ca_file)


@pytest.fixture(scope="module")
def published(smoked, reg, creds, project, empty_docker_config, sign_keys):
    """`invoke publish` of both platforms under one tag, provenance signed (the module's reference result)."""
    proc = cli(
        project,
        *publish_args(reg, creds, "v1", "linux/amd64,linux/arm64", "--sign-key", str(sign_keys["ecdsa"].private)),
        docker_config=empty_docker_config,
    )
    assert proc.returncode == 0, proc.stderr
    print(f"\npublish of 2 platforms: {proc.seconds:.1f}s")
    index, digest = index_of(reg, "v1")
    return {"proc": proc, "index": index, "digest": digest, "platforms": platforms_of(index)}


def test_publish_needs_a_passing_smoke_verdict_for_this_image(smoked):
    build_dir = smoked["linux/amd64"].manifest_path.parent
    verify_smoke(build_dir, smoked["linux/amd64"].image_id)
    with pytest.raises(SmokeError, match="the smoke verdict is for image"):
        verify_smoke(build_dir, "sha256:" + "0" * 64)


def test_one_tag_names_exactly_the_two_smoke_passed_digests(published, smoked, reg, tmp_path):
    index = published["index"]
    assert index["mediaType"] == OCI_INDEX and len(index["manifests"]) == 2
    assert set(published["platforms"]) == set(PLATFORMS)
    for platform, digest in published["platforms"].items():
        verdict = json.loads((smoked[platform].manifest_path.parent / "smoke" / "verdict.json").read_text())
        code, body = reg.manifest(REPO, digest)
        assert code == 200 and json.loads(body)["config"]["digest"] == verdict["image_id"] == smoked[platform].image_id
        record = json.loads(smoked[platform].manifest_path.read_text())["outputs"]["published"][-1]
        assert record["digest"] == digest and record["index"] == published["digest"]
    out = published["proc"].stdout
    assert f"{reg.address}/{REPO}:v1" in out and published["digest"] in out
    # docker pull --platform of the tag resolves each platform to its smoke-passed image
    config = docker_config_with(reg, tmp_path)
    ref = f"{reg.address}/{REPO}:v1"
    try:
        for platform in PLATFORMS:
            pull = subprocess.run(
                [DOCKER, "--config", str(config), "pull", "--platform", platform, ref], capture_output=True, text=True
            )
            assert pull.returncode == 0, pull.stderr
            assert f"Digest: {published['digest']}" in pull.stdout
            got = subprocess.run(
                [DOCKER, "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True
            ).stdout.strip()
            assert got == smoked[platform].image_id, platform
    finally:
        subprocess.run([DOCKER, "image", "rm", ref], capture_output=True)  # the tag only; the images stay


def test_republish_is_idempotent_and_reads_docker_config_credentials(published, reg, project, tmp_path, sign_keys):
    """Signed again with the same ECDSA key (named by SERVEBUILD_SIGN_KEY this time): an ECDSA signature
    differs on every run, so an idempotent re-push must reuse the envelope already attached."""
    before = reg.tags(REPO)
    referrers = {d: reg.manifest(REPO, referrers_tag(d)) for d in published["platforms"].values()}
    proc = cli(
        project,
        "publish",
        "--recipe",
        "toy",
        "--registry",
        reg.address,
        "--platform",
        "linux/arm64,linux/amd64",
        "--tag",
        "v1",
        "--ca",
        str(reg.ca_file),
        docker_config=docker_config_with(reg, tmp_path),
        env_extra={"SERVEBUILD_SIGN_KEY": str(sign_keys["ecdsa"].private)},
    )
    assert proc.returncode == 0, proc.stderr
    assert f"provenance signed by {sign_keys['ecdsa'].keyid}" in proc.stdout
    index, digest = index_of(reg, "v1")
    assert digest == published["digest"] and platforms_of(index) == published["platforms"]
    assert reg.tags(REPO) == before
    for d, (code, body) in referrers.items():
        assert reg.manifest(REPO, referrers_tag(d)) == (code, body)  # no duplicate artifacts
        assert sorted(e["artifactType"] for e in json.loads(body)["manifests"]) == sorted(
            [*provenance.ARTIFACT_TYPES.values(), provenance.SIGNATURE_TYPE]
        )


def test_tag_collision_is_refused_unless_forced(published, reg, creds, project, empty_docker_config):
    first = cli(project, *publish_args(reg, creds, "collide", "linux/amd64"), docker_config=empty_docker_config)
    assert first.returncode == 0, first.stderr
    before = index_of(reg, "collide")
    refused = cli(project, *publish_args(reg, creds, "collide"), docker_config=empty_docker_config)
    assert_one_line(refused, "already points at other images", "--force")
    assert index_of(reg, "collide") == before and "collide-arm64" not in reg.tags(REPO)
    forced = cli(
        project,
        *publish_args(reg, creds, "collide", "linux/amd64,linux/arm64", "--force"),
        docker_config=empty_docker_config,
    )
    assert forced.returncode == 0, forced.stderr
    assert platforms_of(index_of(reg, "collide")[0]) == published["platforms"]


def test_verify_passes_on_the_published_tag(published, reg, creds, project, empty_docker_config, sign_keys):
    proc = cli(
        project,
        "verify",
        f"{reg.address}/{REPO}:v1",
        "--credentials",
        str(creds),
        "--ca",
        str(reg.ca_file),
        docker_config=empty_docker_config,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"verified {reg.address}/{REPO}:v1" in proc.stdout
    for platform, digest in published["platforms"].items():
        line = next(x for x in proc.stdout.splitlines() if x.strip().startswith(f"{platform}: {digest}"))
        # without --public-key: the signature is reported, not checked
        assert line.endswith(f"signature by {sign_keys['ecdsa'].keyid} attached, not checked (give --public-key)")


def assert_one_line(proc, *fragments):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def verify_cli(project, reg, creds, tag, docker_config, *extra):
    return cli(
        project,
        "verify",
        f"{reg.address}/{REPO}:{tag}",
        "--credentials",
        str(creds),
        "--ca",
        str(reg.ca_file),
        *extra,
        docker_config=docker_config,
    )


def test_verify_fails_when_one_attached_artifact_is_changed(published, reg, creds, project, empty_docker_config):
    client = client_for(reg)
    digest = published["platforms"]["linux/amd64"]
    fallback = referrers_tag(digest)
    original = client.get_manifest(REPO, fallback)[0]
    entries = json.loads(original)["manifests"]
    old = next(d for d in entries if d["artifactType"] == provenance.MANIFEST_TYPE)
    art = json.loads(client.get_manifest(REPO, old["digest"])[0])
    doc = json.loads(client.get_blob(REPO, art["layers"][0]["digest"]))
    doc["python"] = "3.99"  # one input changed: the manifest no longer hashes to the image's label
    subject = {"mediaType": art["subject"]["mediaType"], "digest": digest, "size": art["subject"]["size"]}
    new = provenance.attach(client, REPO, subject, "manifest", json.dumps(doc).encode(), "manifest.json")
    tampered = canonical_bytes(
        {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [new if d is old else d for d in entries]}
    )
    client.put_manifest(REPO, fallback, tampered, OCI_INDEX)
    try:
        proc = verify_cli(project, reg, creds, "v1", empty_docker_config)
        assert_one_line(proc, "linux/amd64", "the attached build manifest hashes to", "io.servebuild.manifest.sha256")
    finally:
        client.put_manifest(REPO, fallback, original, OCI_INDEX)
    # the same artifact changed in place in the registry's storage: its bytes no longer match its digest
    sbom = next(d for d in entries if d["artifactType"] == provenance.SBOM_TYPE)
    layer = json.loads(client.get_manifest(REPO, sbom["digest"])[0])["layers"][0]["digest"]
    path = reg.blob_path(layer)
    saved = path.read_bytes()
    path.write_bytes(saved.replace(b"CycloneDX", b"CycloneDx", 1))
    try:
        proc = verify_cli(project, reg, creds, "v1", empty_docker_config)
        assert_one_line(proc, f"blob {layer}", "content hashing to")
    finally:
        path.write_bytes(saved)
    assert verify_cli(project, reg, creds, "v1", empty_docker_config).returncode == 0


def test_verify_compares_the_lock_with_the_project(published, reg, creds, project, empty_docker_config):
    """The fixture recipe was published without a lock; a lock appearing in the project since is a mismatch."""
    lock = project / "recipes" / "toy.lock.yaml"
    lock.write_text("# a lock written after the publish\n")
    try:
        proc = verify_cli(project, reg, creds, "v1", empty_docker_config)
        assert_one_line(proc, "published without a lock", "toy.lock.yaml")
    finally:
        lock.unlink()


def test_verify_fails_when_one_platform_digest_is_changed(published, reg, creds, project, empty_docker_config):
    client = client_for(reg)
    index = json.loads(json.dumps(published["index"]))
    for entry in index["manifests"]:
        if entry["platform"]["architecture"] == "amd64":  # amd64 now names the arm64 image
            arm = next(e for e in published["index"]["manifests"] if e["platform"]["architecture"] == "arm64")
            entry["digest"], entry["size"] = arm["digest"], arm["size"]
    client.put_manifest(REPO, "v1-swapped", canonical_bytes(index), OCI_INDEX)
    proc = verify_cli(project, reg, creds, "v1-swapped", empty_docker_config)
    assert_one_line(proc, "linux/amd64", published["platforms"]["linux/arm64"], "is a linux/arm64 image")


# -- signed provenance ----------------------------------------------------------------------------------------


def attached(client, digest: str, artifact_type: str) -> tuple[dict, bytes]:
    """(referrers entry, layer bytes) of the one artifact of `artifact_type` attached to `digest`."""
    entry = next(d for d in client.referrers(REPO, digest)[0] if d["artifactType"] == artifact_type)
    art = json.loads(client.get_manifest(REPO, entry["digest"])[0])
    return entry, client.get_blob(REPO, art["layers"][0]["digest"])


@contextmanager
def envelope_replaced(client, digest: str, envelope: bytes | None):
    """The referrers of `digest` with its DSSE envelope replaced by another artifact holding `envelope`
    (None: no envelope at all), for one case; the original referrers index is put back after."""
    fallback = referrers_tag(digest)
    original = client.get_manifest(REPO, fallback)[0]
    entries = json.loads(original)["manifests"]
    kept = [d for d in entries if d["artifactType"] != provenance.SIGNATURE_TYPE]
    assert len(kept) == len(entries) - 1
    if envelope is not None:
        image = client.get_manifest(REPO, digest)
        subject = {"mediaType": image[2], "digest": digest, "size": len(image[0])}
        kept.append(provenance.attach(client, REPO, subject, "signature", envelope, "provenance.intoto.dsse.json"))
    client.put_manifest(
        REPO, fallback, canonical_bytes({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": kept}), OCI_INDEX
    )
    try:
        yield
    finally:
        client.put_manifest(REPO, fallback, original, OCI_INDEX)


def test_verify_checks_the_signature_under_the_public_key(
    published, reg, creds, project, empty_docker_config, sign_keys, tmp_path
):
    good = verify_cli(project, reg, creds, "v1", empty_docker_config, "--public-key", str(sign_keys["ecdsa"].public))
    assert good.returncode == 0, good.stderr
    for platform, digest in published["platforms"].items():
        line = next(x for x in good.stdout.splitlines() if x.strip().startswith(f"{platform}: {digest}"))
        assert line.endswith(f"signed by {sign_keys['ecdsa'].keyid}, verified"), line
    # the envelope on each digest signs exactly the statement attached beside it
    client = client_for(reg)
    for digest in published["platforms"].values():
        _, statement = attached(client, digest, provenance.STATEMENT_TYPE)
        _, envelope = attached(client, digest, provenance.SIGNATURE_TYPE)
        assert signing.verify_envelope(envelope, sign_keys["ecdsa"].public.read_bytes()).payload == statement
    other = sign_keys["other"]
    wrong = verify_cli(project, reg, creds, "v1", empty_docker_config, "--public-key", str(other.public))
    assert_one_line(
        wrong, f"{reg.address}/{REPO}:v1 linux/amd64: the provenance signature does not verify under {other.keyid}"
    )
    # a bad --public-key file is one line before the registry is asked (a private key given by mistake)
    bad = verify_cli(project, reg, creds, "v1", empty_docker_config, "--public-key", str(sign_keys["ecdsa"].private))
    line = assert_one_line(bad, "--public-key", "holds a private key")
    assert not any(secret in line.encode() for secret in sign_keys["ecdsa"].secrets)


def test_verify_fails_when_one_platform_envelope_is_swapped(
    published, reg, creds, project, empty_docker_config, sign_keys
):
    """amd64's envelope replaced by other valid envelopes pushed as its referrer; then removed."""
    client = client_for(reg)
    amd, arm = published["platforms"]["linux/amd64"], published["platforms"]["linux/arm64"]
    key = ["--public-key", str(sign_keys["ecdsa"].public)]
    _, arm_envelope = attached(client, arm, provenance.SIGNATURE_TYPE)
    _, amd_statement = attached(client, amd, provenance.STATEMENT_TYPE)
    where = f"{reg.address}/{REPO}:v1 linux/amd64: "
    # a genuine envelope by the right key, of the arm64 statement (a replay onto another digest)
    with envelope_replaced(client, amd, arm_envelope):
        proc = verify_cli(project, reg, creds, "v1", empty_docker_config, *key)
        assert_one_line(
            proc,
            where + "the signed payload is not the attached statement",
            f"attached sha256:{provenance.sha256_bytes(amd_statement)}",
        )
    # amd64's exact statement, signed by another key
    with envelope_replaced(client, amd, signing.sign(amd_statement, sign_keys["other"].signer)):
        proc = verify_cli(project, reg, creds, "v1", empty_docker_config, *key)
        assert_one_line(proc, where + f"the provenance signature does not verify under {sign_keys['ecdsa'].keyid}")
    # no envelope at all: a failure with the key, a note without it
    with envelope_replaced(client, amd, None):
        proc = verify_cli(project, reg, creds, "v1", empty_docker_config, *key)
        assert_one_line(proc, where + f"no signed provenance attached to {amd}")
        unkeyed = verify_cli(project, reg, creds, "v1", empty_docker_config)
        assert unkeyed.returncode == 0, unkeyed.stderr
        lines = {x.strip().split(":")[0]: x for x in unkeyed.stdout.splitlines()[1:]}
        assert lines["linux/amd64"].endswith(", unsigned") and "attached, not checked" in lines["linux/arm64"]
    assert verify_cli(project, reg, creds, "v1", empty_docker_config, *key).returncode == 0


# -- faults: the registry killed mid-publish ------------------------------------------------------------------


def library_builds(engine, smoked) -> list[PlatformBuild]:
    return [check_build(engine, p, smoked[p].manifest_path.parent) for p in PLATFORMS]


def test_registry_killed_between_platform_pushes_and_restarted(engine, smoked, published, reg):
    """Kill -9 after the first platform's push (a deterministic point, through publish's progress hook),
    start it again 2 s later on the same port and storage: the second push is retried and completes, with
    the digests of the reference publish."""
    restarted, events = [], []

    def hook(event, detail):
        events.append(event)
        if event == "pushed" and not restarted:
            reg.kill()
            timer = threading.Timer(2.0, lambda: (reg.start(), restarted.append(time.monotonic())))
            timer.start()
            restarted.append(timer)

    result = publish(engine, library_builds(engine, smoked), client_for(reg), REPO, "fault-restart", progress=hook)
    restarted[0].join()
    assert len(restarted) == 2  # it was killed and came back during the publish
    assert events.count("pushed") == 2 and "retrying" in events[events.index("pushed") :], events
    assert result["platforms"] == published["platforms"]
    assert platforms_of(index_of(reg, "fault-restart")[0]) == published["platforms"]


def test_registry_killed_during_a_layer_upload_and_restarted(engine, smoked, published, reg, tmp_path):
    """A fresh registry (so the layers really travel, none is already there), killed -9 one second into the
    arm64 push (its ~200 MB layer upload takes several seconds here) and started again two seconds later on
    the same storage: the push is retried and the publish completes with the reference digests."""
    fresh = TLSRegistry(tmp_path / "fresh", {USER: reg.password})
    marks = {}

    def kill():
        marks["killed"] = time.monotonic()
        fresh.kill()

    timers = [threading.Timer(1.0, kill), threading.Timer(3.0, fresh.start)]

    def hook(event, detail):
        if event == "pushing" and "linux/arm64" in detail:
            for t in timers:
                t.start()
        if event == "pushed" and "linux/arm64" in detail:
            marks["pushed"] = time.monotonic()

    try:
        client = RegistryClient(fresh.address, Credentials(USER, reg.password, "test"), fresh.ca_file)
        result = publish(engine, library_builds(engine, smoked), client, REPO, "fault-upload", progress=hook)
        for t in timers:
            t.join()
        assert marks["killed"] < marks["pushed"]  # the kill landed while the arm64 push was under way
        assert result["platforms"] == published["platforms"]
        code, body = fresh.manifest(REPO, "fault-upload")
        assert code == 200 and platforms_of(json.loads(body)) == published["platforms"]
    finally:
        for t in timers:
            t.cancel()
        fresh.stop()


def test_registry_killed_before_the_index_leaves_no_tag(engine, smoked, published, reg):
    """Killed after the artifacts, before the index is written, and not back within the retries: one line,
    and once it is back no tag points at a partial index."""

    def hook(event, detail):
        if event == "attached" and "linux/arm64" in detail:
            reg.kill()

    start = time.monotonic()
    try:
        with pytest.raises(ServebuildError) as info:
            publish(engine, library_builds(engine, smoked), client_for(reg), REPO, "fault-dead", progress=hook)
    finally:
        elapsed = time.monotonic() - start
        reg.start()  # a no-op if the hook never ran
    line = str(info.value)
    assert "\n" not in line and "unreachable after 5 tries" in line, line
    assert "fault-dead" not in reg.tags(REPO)
    print(f"\nfailed publish after bounded retries: {elapsed:.1f}s")


# -- bad input: one line, exit 2, nothing pushed ------------------------------------------------------------


@contextmanager
def changed(path: Path, content: bytes | None):
    """Replace (or with None remove) a build file for one case, and put it back."""
    saved = path.read_bytes()
    try:
        if content is None:
            path.unlink()
        else:
            path.write_bytes(content)
        yield
    finally:
        path.write_bytes(saved)


@contextmanager
def moved(folder: Path):
    aside = folder.with_name(folder.name + ".aside")
    folder.rename(aside)
    try:
        yield
    finally:
        aside.rename(folder)


def _verdict(smoked, platform="linux/arm64"):
    return smoked[platform].manifest_path.parent / "smoke" / "verdict.json"


def _manifest(smoked, platform="linux/arm64"):
    return smoked[platform].manifest_path


BAD_CASES = [
    # id, how (args, docker_config, credentials file, ctx), fragments
    ("no-credentials", dict(creds=None), ["no credentials for"]),
    ("wrong-password", dict(creds="wrong"), ["wrong credentials for", "'alice'"]),
    ("untrusted-certificate", dict(ca=None), ["untrusted certificate"]),
    ("other-ca", dict(ca="other"), ["untrusted certificate"]),
    (
        "missing-ca-file",
        dict(ca="missing"),
        ["cannot read a TLS or ssh_config file: no such file or directory", "--ca"],
    ),
    ("ca-not-pem", dict(ca="not-pem"), ["holds no PEM certificate"]),
    ("unknown-platform", dict(platforms="linux/amd64,linux/s390x"), ["unknown platform 'linux/s390x'"]),
    ("platform-twice", dict(platforms="linux/amd64,linux/amd64"), ["is given twice"]),
    ("platform-not-built", dict(ctx="no-build-dir"), ["no build for linux/arm64", "invoke build"]),
    ("manifest-missing", dict(ctx="no-manifest"), ["manifest.json", "no build for linux/arm64"]),
    ("manifest-corrupt", dict(ctx="corrupt-manifest"), ["manifest.json", "build manifest is not JSON"]),
    ("manifest-bad-image-id", dict(ctx="bad-image-id"), ["outputs.image_id", "sha256:<64 hex>"]),
    ("verdict-missing", dict(ctx="no-verdict"), ["verdict.json", "no smoke verdict"]),
    ("verdict-corrupt", dict(ctx="corrupt-verdict"), ["verdict.json", "smoke verdict is not JSON"]),
    ("verdict-failed", dict(ctx="failed-verdict"), ["failed its smoke suite"]),
    ("verdict-other-image", dict(ctx="other-verdict"), ["the smoke verdict is for image"]),
    ("bad-registry", dict(registry="bad host:5000"), ["not a registry reference"]),
    ("bad-repository", dict(repository="Servebuild/UPPER"), ["not a registry reference"]),
    ("unreachable-registry", dict(registry="127.0.0.1:9"), ["127.0.0.1:9 unreachable after 5 tries"]),
    ("credentials-not-object", dict(creds_text='["alice", "pw"]'), ["must hold a JSON object"]),
    ("credentials-not-json", dict(creds_text="username=alice"), ["credentials file is not JSON"]),
    (
        "credentials-extra-key",
        dict(creds_text='{"username":"alice","password":"x","token":"y"}'),
        ["unknown key 'token'"],
    ),
    ("credentials-no-password", dict(creds_text='{"username":"alice"}'), ["missing 'password'"]),
    ("credentials-world-readable", dict(creds_mode=0o644), ["readable by others", "chmod 600"]),
    ("credentials-file-missing", dict(creds="missing"), ["cannot read a credentials file"]),
    ("docker-config-bad-auth", dict(creds=None, docker_auth="not base64!"), ["`auth` is not base64 of USER:PASSWORD"]),
    (
        "sign-key-certificate",
        dict(sign_key="certificate"),
        ["--sign-key", "holds a certificate, not a PEM private key"],
    ),
    ("sign-key-directory", dict(sign_key="directory"), ["--sign-key", "is not a regular file"]),
    ("sign-key-missing", dict(sign_key="missing"), ["--sign-key", "cannot read a PEM private key"]),
    ("sign-key-huge", dict(sign_key="huge"), ["--sign-key", "at most 65536 are read (64 KiB, a PEM private key)"]),
    ("sign-key-world-readable", dict(sign_key="world-readable"), ["--sign-key", "readable by others", "chmod 600"]),
    ("sign-key-rsa", dict(sign_key="rsa"), ["--sign-key", "is an RSA key (2048 bits)", "Ed25519 or ECDSA P-256"]),
    ("sign-key-material-in-argv", dict(sign_key="argv"), ["--sign-key: is not a file path", "never the key itself"]),
    ("sign-key-env-public-key", dict(sign_env="public-key"), ["SERVEBUILD_SIGN_KEY", "holds a public key"]),
]


def bad_sign_key(how: str, reg, sign_keys, tmp_path) -> tuple[str, list[bytes]]:
    """A bad --sign-key value, and the secrets it must not leak (the key bytes it holds or comes from)."""
    good = sign_keys["ecdsa"]
    pem = good.private.read_bytes()
    if how == "rsa":
        from cryptography.hazmat.primitives import serialization as ser
        from cryptography.hazmat.primitives.asymmetric import rsa

        rsa_pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
            ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption()
        )
        path = tmp_path / "rsa.key"
        path.write_bytes(rsa_pem)
        path.chmod(0o600)
        return str(path), _pem_body(rsa_pem)
    if how in ("huge", "world-readable"):
        path = tmp_path / f"{how}.key"
        path.write_bytes(pem + (b"A" * (100 << 10) if how == "huge" else b""))
        path.chmod(0o600 if how == "huge" else 0o644)
        return str(path), good.secrets
    value = {
        "certificate": str(reg.ca_file),
        "directory": str(tmp_path),
        "missing": str(tmp_path / "absent.key"),
        "argv": pem.decode(),
    }[how]
    return value, good.secrets


@pytest.mark.parametrize("case_id,how,fragments", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_input_is_one_line_and_pushes_nothing(
    case_id, how, fragments, smoked, reg, creds, project, tmp_path, empty_docker_config, sign_keys
):
    import trustme

    tag = f"bad-{case_id}"
    registry = how.get("registry", reg.address)
    args = [
        "publish",
        "--recipe",
        "toy",
        "--registry",
        registry,
        "--platform",
        how.get("platforms", "linux/amd64,linux/arm64"),
        "--tag",
        tag,
    ]
    if "repository" in how:
        args += ["--repository", how["repository"]]
    ca = how.get("ca", "good")
    if ca == "good":
        args += ["--ca", str(reg.ca_file)]
    elif ca == "other":
        trustme.CA().cert_pem.write_to_path(str(tmp_path / "other-ca.pem"))
        args += ["--ca", str(tmp_path / "other-ca.pem")]
    elif ca == "missing":
        args += ["--ca", str(tmp_path / "nope.pem")]
    elif ca == "not-pem":
        (tmp_path / "ca.txt").write_text("not a certificate\n")
        args += ["--ca", str(tmp_path / "ca.txt")]
    cred = how.get("creds", "good")
    if "creds_text" in how or "creds_mode" in how:
        path = tmp_path / "creds.json"
        path.write_text(how.get("creds_text", creds.read_text()))
        path.chmod(how.get("creds_mode", 0o600))
        args += ["--credentials", str(path)]
    elif cred == "good":
        args += ["--credentials", str(creds)]
    elif cred == "wrong":
        args += ["--credentials", str(write_credentials(tmp_path / "wrong.json", USER, "not-" + reg.password))]
    elif cred == "missing":
        args += ["--credentials", str(tmp_path / "absent.json")]
    docker_config = empty_docker_config
    if "docker_auth" in how:
        docker_config = tmp_path / "dc"
        docker_config.mkdir()
        (docker_config / "config.json").write_text(json.dumps({"auths": {reg.address: {"auth": how["docker_auth"]}}}))
    key_secrets, env_extra = [], {}
    if "sign_key" in how:
        value, key_secrets = bad_sign_key(how["sign_key"], reg, sign_keys, tmp_path)
        args += ["--sign-key", value]
    if how.get("sign_env") == "public-key":
        env_extra["SERVEBUILD_SIGN_KEY"] = str(sign_keys["ecdsa"].public)
        key_secrets = sign_keys["ecdsa"].secrets

    arm = smoked["linux/arm64"]
    contexts = {
        None: None,
        "no-build-dir": lambda: moved(arm.manifest_path.parent),
        "no-manifest": lambda: changed(_manifest(smoked), None),
        "corrupt-manifest": lambda: changed(_manifest(smoked), _manifest(smoked).read_bytes()[:200]),
        "bad-image-id": lambda: changed(
            _manifest(smoked),
            json.dumps({**json.loads(_manifest(smoked).read_text()), "outputs": {"image_id": "latest"}}).encode(),
        ),
        "no-verdict": lambda: changed(_verdict(smoked), None),
        "corrupt-verdict": lambda: changed(_verdict(smoked), b'{"passed": tru'),
        "failed-verdict": lambda: changed(
            _verdict(smoked), json.dumps({**json.loads(_verdict(smoked).read_text()), "passed": False}).encode()
        ),
        "other-verdict": lambda: changed(
            _verdict(smoked),
            json.dumps({**json.loads(_verdict(smoked).read_text()), "image_id": "sha256:" + "1" * 64}).encode(),
        ),
    }
    catalog, tags = reg.catalog(), reg.tags(REPO)
    make = contexts[how.get("ctx")]
    if make is None:
        proc = cli(project, *args, docker_config=docker_config, env_extra=env_extra)
    else:
        with make():
            proc = cli(project, *args, docker_config=docker_config, env_extra=env_extra)
    line = assert_one_line(proc, *fragments)
    assert reg.password not in proc.stderr + proc.stdout
    for secret in key_secrets:
        assert secret not in (proc.stderr + proc.stdout).encode(), "signing key bytes in the output"
    assert reg.catalog() == catalog and reg.tags(REPO) == tags, line  # nothing pushed, nothing tagged
    local = subprocess.run(
        [DOCKER, "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True
    ).stdout
    assert tag not in local


# -- secrets ------------------------------------------------------------------------------------------------


def _pem_body(pem: bytes) -> list[bytes]:
    """Long base64 lines of a PEM key: any one of them found anywhere means the key leaked."""
    return [line for line in pem.splitlines() if len(line) >= 40 and not line.startswith(b"-----")]


def test_no_secret_in_layers_builds_manifests_or_artifacts(published, smoked, reg, project, tmp_path, sign_keys):
    secrets = [reg.password.encode(), base64.b64encode(f"{USER}:{reg.password}".encode())]
    secrets += _pem_body(reg.key_pem) + _pem_body(reg.ca_key_pem)
    secrets += sign_keys["ecdsa"].secrets  # the provenance signing key (PEM lines, DER, raw scalar; hex, base64)
    assert len(secrets) > 10

    def clean(data: bytes, where: str) -> None:
        for secret in secrets:
            assert secret not in data, f"a secret is in {where}"

    # every layer of both images (docker save: the layers as the engine holds them)
    for platform in PLATFORMS:
        tar = tmp_path / f"{platform.replace('/', '-')}.tar"
        subprocess.run([DOCKER, "save", "-o", str(tar), smoked[platform].image_id], check=True)
        clean(tar.read_bytes(), f"the {platform} image")
        tar.unlink()
    # every file under the project's build/ (logs, manifests, verdicts, contexts)
    for path in (project / "build").rglob("*"):
        if path.is_file():
            clean(path.read_bytes(), str(path))
    # what the publish printed
    clean((published["proc"].stdout + published["proc"].stderr).encode(), "the publish output")
    # the index, every platform manifest and config, every attached artifact and its layers
    client = client_for(reg)
    clean(client.get_manifest(REPO, "v1")[0], "the index")
    seen = 0
    for digest in published["platforms"].values():
        body = client.get_manifest(REPO, digest)[0]
        clean(body, digest)
        clean(client.get_blob(REPO, json.loads(body)["config"]["digest"]), f"config of {digest}")
        referrers, _ = client.referrers(REPO, digest)
        assert {d["artifactType"] for d in referrers} == set(provenance.ALL_TYPES.values())  # the envelope too
        for d in referrers:
            art = client.get_manifest(REPO, d["digest"])[0]
            clean(art, d["digest"])
            for layer in json.loads(art)["layers"]:
                clean(client.get_blob(REPO, layer["digest"]), f"artifact layer {layer['digest']}")
                seen += 1
    assert seen == 8
    # and the private Docker config publish wrote for the engine's push is gone
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob("servebuild-docker-*"))


def test_sbom_is_what_the_image_holds(published, reg):
    client = client_for(reg)
    for platform, digest in published["platforms"].items():
        referrers, _ = client.referrers(REPO, digest)
        sbom_desc = next(d for d in referrers if d["artifactType"] == provenance.SBOM_TYPE)
        layer = json.loads(client.get_manifest(REPO, sbom_desc["digest"])[0])["layers"][0]
        sbom = json.loads(client.get_blob(REPO, layer["digest"]))
        assert sbom["bomFormat"] == "CycloneDX" and sbom["specVersion"] == "1.5"
        names = {c["name"].lower(): c["version"] for c in sbom["components"]}
        assert names["six"] == "1.17.0" and names["packaging"] == "24.2", platform
        assert names["toyserve"].startswith("1.0.0"), names  # the patched engine, as installed (1.0.0+sbN.STACK)
        prov_desc = next(d for d in referrers if d["artifactType"] == provenance.STATEMENT_TYPE)
        layer = json.loads(client.get_manifest(REPO, prov_desc["digest"])[0])["layers"][0]
        statement = json.loads(client.get_blob(REPO, layer["digest"]))
        assert statement["_type"] == "https://in-toto.io/Statement/v1"
        deps = {d["name"]: d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
        assert {"engine-source", "patch:pr-1", "patch:pr-2", "patch:local-version-banner", "base:runtime"} <= set(deps)
        assert statement["predicate"]["buildDefinition"]["externalParameters"]["recipe"]["name"] == "toy"


# mode -> words the one line must hold (tests/hostile_registry.py: the tag v1 is what each mode breaks)
HOSTILE_PUBLISH = {
    "slow-loris-body": "did not finish within 4 s",
    "never-answers": "GET /v2/ did not finish within 4 s",
    "huge-manifest-undeclared": "larger than its limit of 4194304 bytes",
    "deep-json": "nested deeper than 64 levels",
    "redirect-loop": "in a loop",
    "token-flood": "the limit is 1048576",
    "wrong-digest": "with content hashing to",
}


@pytest.mark.parametrize("mode", sorted(HOSTILE_PUBLISH))
def test_publish_to_a_hostile_registry_is_bounded_and_pushes_nothing(
    mode, smoked, project, tmp_path, empty_docker_config
):
    """The registry's answers to publish's first reads (its /v2/, its token service, what the tag names now)
    hold or flood it: one line, exit 2, within the request deadline, bounded memory, no write of any kind."""
    registry = HostileRegistry(mode)
    try:
        proc = run_cli(
            project,
            [
                "publish",
                "--recipe",
                "toy",
                "--registry",
                registry.address,
                "--platform",
                "linux/amd64",
                "--tag",
                "v1",
                "--credentials",
                str(write_creds(tmp_path / "creds.json")),
            ],
            project,
            {
                "PYTHONPATH": str(REPO_ROOT),
                "DOCKER_CONFIG": str(empty_docker_config),
                "SERVEBUILD_REGISTRY_TIMEOUT": "4",
                "SERVEBUILD_REGISTRY_DEADLINE": "12",
            },
        )
    finally:
        registry.stop()
    print(f"\n{mode}: {proc.seconds:.1f} s, peak RSS {proc.peak_mib:.0f} MiB: {proc.lines}")
    assert proc.returncode == 2 and len(proc.lines) == 1, (proc.lines, proc.stdout)
    assert HOSTILE_PUBLISH[mode] in proc.lines[0] and registry.address in proc.lines[0], proc.lines
    assert proc.seconds < 30 and proc.peak_mib < 200, (proc.seconds, proc.peak_mib)
    assert registry.writes() == [] and not any("/blobs/" in path for _, path in registry.requests)
    assert "pushing" not in proc.stdout


def test_publish_refuses_a_manifest_whose_config_is_not_the_built_image(engine, base_images, registry, tmp_path):
    """The push is real (a real registry on 127.0.0.1); the lie is a stand-in: a registry cannot be
    made to serve other bytes under a digest, so a client subclass returns the served manifest with
    another config digest, as a compromised or broken registry or proxy would."""
    import json as _json
    from servebuild.release.publish import PlatformBuild, PublishError, push_platform
    from servebuild.registry.client import RegistryClient

    class Lying(RegistryClient):
        def get_manifest(self, repo, reference):
            body, digest, media = super().get_manifest(repo, reference)
            doc = _json.loads(body)
            doc["config"]["digest"] = "sha256:" + "f" * 64
            return _json.dumps(doc).encode(), digest, media

    image = engine.image_id(base_images["amd64"])
    build = PlatformBuild(platform="linux/amd64", build_dir=tmp_path, manifest={}, image_id=image)
    with pytest.raises(PublishError) as info:
        push_platform(engine, Lying(registry), "servebuild-test/promise-config", "v1", build, None, 0.1)
    line = str(info.value)
    assert "\n" not in line and f"the pushed manifest's config is sha256:{'f' * 64}, the built image is {image}" in line
    assert build.digest is None  # nothing recorded as published
