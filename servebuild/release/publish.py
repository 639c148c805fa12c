"""Publish smoke-tested builds to a registry: one tag, one OCI index, each platform by digest.

Order (nothing in the registry changes until every check has passed):
1. every platform's build manifest, smoke verdict and image are checked; credentials and TLS trust are
   settled; the tag (and each per-platform helper tag) is checked for a collision;
2. the Python environment of each image is listed (a container without network) for its SBOM;
3. each platform image is pushed by the engine (`docker push TAG-ARCH`; the engine holds the layers)
   and read back by digest: its config must be the built image;
4. SBOM, build manifest and in-toto statement are attached to each platform digest, and with a signing
   key (loaded and checked by the caller before step 1) a DSSE envelope signing the statement's bytes;
5. the OCI index naming exactly those digests is written under the tag (one PUT: a tag never points at
   a partial index) and read back: each platform must resolve to the digest whose verdict passed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from servebuild import procs
from servebuild.release import provenance

from servebuild.release import signing
from servebuild.release.credentials import DockerConfigDir
from servebuild.build.docker import DockerClient
from servebuild.build.farm import engine_for_build
from servebuild.errors import DockerError, InputError, Refused, SmokeError
from servebuild.fsutil import read_json_object, sha256_file, write_json
from servebuild.lock.lockfile import lock_path
from servebuild.plan.make import BuildOptions, make_plan
from servebuild.platforms import arch_of
from servebuild.registry.limits import seconds_from_env
from servebuild.registry.client import (
    DIGEST,
    DOCKER_LIST,
    OCI_INDEX,
    OCI_MANIFEST,
    RegistryClient,
    RegistryError,
    canonical_bytes,
)

PUSHED = re.compile(r"digest: (sha256:[0-9a-f]{64})")
IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}\Z")
MAX_JSON = 16 << 20
PUSH_TRIES = 4
PUSH_S = 7200.0  # one docker push of one platform (a 9 GB engine image on a slow uplink)
MAX_PLATFORMS = 64  # index entries looked at when checking what a tag names now


class PublishError(Refused):
    """publish refused: what was wrong, and that nothing was pushed."""


def read_json_file(path: Path, what: str) -> dict:
    """A build's JSON file, checked: regular, bounded, UTF-8, an object. One line on any problem."""
    return read_json_object(path, what, MAX_JSON, PublishError)


def build_image_id(manifest: dict, path: Path) -> str:
    outputs = manifest.get("outputs")
    image_id = outputs.get("image_id") if isinstance(outputs, dict) else None
    if not isinstance(image_id, str) or not IMAGE_ID.match(image_id):
        raise PublishError(
            "outputs.image_id is missing or not sha256:<64 hex>; build again", file=str(path), field="outputs.image_id"
        )
    return image_id


def verify_smoke(build_dir: Path, image_id: str) -> None:
    verdict_path = build_dir / "smoke" / "verdict.json"
    if not verdict_path.exists():
        raise SmokeError(
            "no smoke verdict for this build; run `invoke test-image` first (or --no-verify)", file=str(verdict_path)
        )
    verdict = read_json_file(verdict_path, "smoke verdict")
    if verdict.get("image_id") != image_id:
        raise SmokeError(
            f"the smoke verdict is for image {str(verdict.get('image_id'))[:80]}, not the built "
            f"{image_id}; run `invoke test-image` again",
            file=str(verdict_path),
        )
    if verdict.get("passed") is not True:
        raise SmokeError("the image failed its smoke suite; it is not published", file=str(verdict_path))


@dataclass
class PlatformBuild:
    platform: str
    build_dir: Path
    manifest: dict
    image_id: str
    lock: Optional[dict] = None  # {"path", "sha256"} of the recipe's lock file, if any
    installed: Optional[dict] = None  # the image's Python distributions (for the SBOM)
    digest: Optional[str] = None  # pushed manifest digest
    descriptor: Optional[dict] = None  # its descriptor in the index
    artifacts: dict = field(default_factory=dict)
    engine: Optional[DockerClient] = None  # the engine holding this image (a farm node); None: the caller's


def check_build(docker: DockerClient, platform: str, build_dir: Path, verify: bool = True) -> PlatformBuild:
    path = build_dir / "manifest.json"
    if not path.exists() and not path.is_symlink():
        raise PublishError(f"no build for {platform}; run `invoke build --platform {platform}` first", file=str(path))
    manifest = read_json_file(path, "build manifest")
    image_id = build_image_id(manifest, path)
    if manifest.get("platform") != platform:
        raise PublishError(
            f"the build manifest is for {str(manifest.get('platform'))[:40]!r}, not {platform}",
            file=str(path),
            field="platform",
        )
    if verify:
        verify_smoke(build_dir, image_id)
    if docker.image_id(image_id) is None:
        raise DockerError(
            f"built image {image_id} for {platform} is no longer in the engine; build again", field="publish"
        )
    return PlatformBuild(platform, build_dir, manifest, image_id)


def lock_record(lock_file: Optional[Path], root: Optional[Path]) -> Optional[dict]:
    if lock_file is None or not lock_file.is_file():
        return None
    shown = lock_file.relative_to(root) if root and lock_file.is_relative_to(root) else Path(lock_file.name)
    return {"path": str(shown), "sha256": sha256_file(lock_file)}


def engine_trusts(registry: str, client: RegistryClient) -> None:
    """A local dockerd verifies a TLS registry against /etc/docker/certs.d/HOST:PORT/ (private CAs)."""
    if client.insecure or client.ca is None:
        return
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return  # a remote engine: its own certs.d, not ours to see
    cert_dir = Path(os.environ.get("SERVEBUILD_DOCKER_CERTS_D", "/etc/docker/certs.d")) / registry
    if not any(cert_dir.glob("*.crt")):
        raise PublishError(
            f"the Docker engine does not trust {registry}: install the CA as "
            f"{cert_dir}/ca.crt (dockerd reads it on each push)",
            field="--ca",
        )


def _arch_tag(tag: str, platform: str) -> str:
    return f"{tag}-{arch_of(platform)}"[:128]


def _existing_images(client: RegistryClient, repo: str, reference: str) -> Optional[dict[str, str]]:
    """{platform: config digest} of what `reference` names now (None if it names nothing)."""
    found = client.get_manifest(repo, reference)
    if found is None:
        return None
    body, _, media = found
    doc = json.loads(body)  # get_manifest checked it: a JSON object within the size and depth limits
    if media in (OCI_INDEX, DOCKER_LIST):
        out = {}
        entries = doc.get("manifests") if isinstance(doc.get("manifests"), list) else []
        for entry in entries[:MAX_PLATFORMS]:
            entry = entry if isinstance(entry, dict) else {}
            p = entry.get("platform") if isinstance(entry.get("platform"), dict) else {}
            child = (
                client.get_manifest(repo, str(entry.get("digest", "")))
                if DIGEST.match(str(entry.get("digest", "")))
                else None
            )
            out[f"{p.get('os')}/{p.get('architecture')}"] = _config_digest(child[0]) if child else None
        return out
    return {"": _config_digest(body)}


def _config_digest(body: bytes) -> Optional[str]:
    config = json.loads(body).get("config")
    return str(config.get("digest")) if isinstance(config, dict) else None


def check_collisions(client: RegistryClient, repo: str, tag: str, builds: list[PlatformBuild], force: bool) -> None:
    wanted = {b.platform: b.image_id for b in builds}
    current = _existing_images(client, repo, tag)
    if current is not None and current != wanted and not force:
        shown = ", ".join(f"{p or 'single'}={(d or '?')[:19]}" for p, d in sorted(current.items()))
        raise PublishError(
            f"tag {tag} of {client.registry}/{repo} already points at other images ({shown}); give --force to move it",
            field="--tag",
        )
    for b in builds:
        helper = _arch_tag(tag, b.platform)
        current = _existing_images(client, repo, helper)
        if current is not None and set(current.values()) != {b.image_id} and not force:
            raise PublishError(
                f"tag {helper} of {client.registry}/{repo} already points at another image "
                f"({next(iter(current.values()), '?')[:19]}); give --force to move it",
                field="--tag",
            )


def _docker_push(docker: DockerClient, config_dir: Optional[Path], ref: str) -> subprocess.CompletedProcess:
    """One `docker push`, bounded by SERVEBUILD_PUSH_TIMEOUT (default PUSH_S): a registry that stalls the
    engine's upload ends the publish in one line instead of holding it."""
    args = [docker.client] + (["--config", str(config_dir)] if config_dir else []) + ["push", ref]
    seconds = seconds_from_env("SERVEBUILD_PUSH_TIMEOUT", PUSH_S)
    try:
        return procs.run(args, "registry", env=docker._env(), capture_output=True, text=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        raise PublishError(
            f"docker push of {ref} did not finish within {seconds:g} s (SERVEBUILD_PUSH_TIMEOUT); "
            f"the index was not written, so the tag did not move",
            field="publish",
        ) from None


FATAL_PUSH = ("unauthorized", "no basic auth credentials", "x509", "denied", "certificate")


def push_platform(
    docker: DockerClient,
    client: RegistryClient,
    repo: str,
    tag: str,
    b: PlatformBuild,
    config_dir: Optional[Path],
    backoff: float,
    progress: Callable[[str, str], None] = lambda event, detail: None,
) -> None:
    remote = f"{client.registry}/{repo}:{_arch_tag(tag, b.platform)}"
    docker.tag(b.image_id, remote)
    progress("pushing", f"{b.platform}: {remote}")
    try:
        delay = backoff
        for attempt in range(PUSH_TRIES):
            proc = _docker_push(docker, config_dir, remote)
            if proc.returncode == 0:
                break
            detail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            if attempt == PUSH_TRIES - 1 or any(word in detail.lower() for word in FATAL_PUSH):
                raise PublishError(f"push of {remote} refused after {attempt + 1} tries: {detail}", field="publish")
            progress("retrying", f"{b.platform} in {delay:g}s: {detail}")
            time.sleep(delay)
            delay *= 2
        m = PUSHED.search(proc.stdout)
        if not m:
            raise PublishError(f"push of {remote} reported no digest", field="publish")
    finally:
        docker.remove_image(remote, force=False)  # the local alias only; the image stays
    digest = m.group(1)
    found = client.get_manifest(repo, digest)
    if found is None:
        raise PublishError(f"{client.registry} does not serve {repo}@{digest} right after its push", field="publish")
    body, _, media = found
    config = _config_digest(body)
    if config != b.image_id:
        raise PublishError(
            f"the pushed manifest's config is {config}, the built image is {b.image_id}", field="publish"
        )
    os_, arch = b.platform.split("/", 1)
    b.digest = digest
    b.descriptor = {
        "mediaType": media,
        "digest": digest,
        "size": len(body),
        "platform": {"architecture": arch, "os": os_},
    }


def _signed_before(
    client: RegistryClient, repo: str, digest: str, statement_bytes: bytes, signer: signing.PrivateKey
) -> Optional[bytes]:
    """An envelope already attached to `digest` that signs exactly these statement bytes under this key
    (an ECDSA signature differs on every run: re-signing would attach a second envelope on a re-push)."""
    for d in client.referrers(repo, digest)[0]:
        if d.get("artifactType") != provenance.SIGNATURE_TYPE or d.get("mediaType") != OCI_MANIFEST:
            continue
        try:  # anything unreadable here is not ours to reuse: a new envelope is attached beside it
            envelope = provenance.read_artifact(client, repo, digest, "signature", d)
            signed = signing.verify_envelope(envelope, signer.public)
        except (RegistryError, provenance.ArtifactError, signing.SigningError):
            continue
        if signed.payload_type == signing.PAYLOAD_TYPE and signed.payload == statement_bytes:
            return envelope
    return None


def attach_provenance(
    docker: DockerClient,
    client: RegistryClient,
    repo: str,
    b: PlatformBuild,
    signer: Optional[signing.PrivateKey] = None,
) -> None:
    subject = b.descriptor
    sbom = provenance.cyclonedx(b.installed, f"{client.registry}/{repo}", b.digest, b.platform, b.image_id)
    sbom_bytes = json.dumps(sbom, indent=2, sort_keys=True).encode() + b"\n"
    manifest_bytes = json.dumps(provenance.attached_manifest(b.manifest), indent=2, sort_keys=True).encode() + b"\n"
    descriptors = [
        provenance.attach(client, repo, subject, "sbom", sbom_bytes, "sbom.cdx.json"),
        provenance.attach(client, repo, subject, "manifest", manifest_bytes, "manifest.json"),
    ]
    layer_digests = {
        "sbom": "sha256:" + provenance.sha256_bytes(sbom_bytes),
        "manifest": "sha256:" + provenance.sha256_bytes(manifest_bytes),
    }
    statement = provenance.statement(b.manifest, f"{client.registry}/{repo}", b.digest, b.lock, layer_digests)
    statement_bytes = json.dumps(statement, indent=2, sort_keys=True).encode() + b"\n"
    descriptors.append(
        provenance.attach(client, repo, subject, "provenance", statement_bytes, "provenance.intoto.json")
    )
    if signer is not None:
        envelope = _signed_before(client, repo, b.digest, statement_bytes, signer) or signing.sign(
            statement_bytes, signer
        )
        descriptors.append(
            provenance.attach(client, repo, subject, "signature", envelope, "provenance.intoto.dsse.json")
        )
    how = provenance.register_referrers(client, repo, b.digest, descriptors)
    b.artifacts = {d["annotations"]["io.servebuild.artifact"]: d["digest"] for d in descriptors}
    b.artifacts["referrers"] = how


def index_bytes(builds: list[PlatformBuild]) -> bytes:
    entries = sorted((b.descriptor for b in builds), key=lambda d: (d["platform"]["os"], d["platform"]["architecture"]))
    return canonical_bytes({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries})


def read_back(client: RegistryClient, repo: str, tag: str, builds: list[PlatformBuild], index_digest: str) -> None:
    found = client.get_manifest(repo, tag)
    if found is None or found[1] != index_digest:
        raise PublishError(
            f"{client.registry}/{repo}:{tag} reads back as {found[1] if found else 'nothing'}, wrote {index_digest}",
            field="publish",
        )
    served = {
        f"{e['platform']['os']}/{e['platform']['architecture']}": e["digest"] for e in json.loads(found[0])["manifests"]
    }
    for b in builds:
        if served.get(b.platform) != b.digest:
            raise PublishError(
                f"{tag} resolves {b.platform} to {served.get(b.platform)}, the smoke-passed image "
                f"was pushed as {b.digest}",
                field="publish",
            )
        child = client.get_manifest(repo, b.digest)
        config = _config_digest(child[0]) if child else None
        verdict = (
            read_json_file(b.build_dir / "smoke" / "verdict.json", "smoke verdict")
            if (b.build_dir / "smoke" / "verdict.json").exists()
            else {"image_id": b.image_id}
        )
        if config != b.image_id or verdict.get("image_id") != config:
            raise PublishError(
                f"{b.platform} of {tag} resolves to config {config}, the verdict is for {verdict.get('image_id')}",
                field="publish",
            )
    if set(served) != {b.platform for b in builds}:
        raise PublishError(
            f"{tag} names platforms {sorted(served)}, published {sorted(b.platform for b in builds)}", field="publish"
        )


def publish(
    docker: DockerClient,
    builds: list[PlatformBuild],
    client: RegistryClient,
    repo: str,
    tag: str,
    force: bool = False,
    progress: Callable[[str, str], None] = lambda event, detail: None,
    backoff: float = 1.0,
    signer: Optional[signing.PrivateKey] = None,
) -> dict:
    """Everything after the per-build checks (see the module docstring for the order). `signer`: sign
    each platform's statement (a DSSE envelope attached beside it)."""
    engine_trusts(client.registry, client)
    with client.operation(f"checking what {tag} of {repo} names now"):
        check_collisions(client, repo, tag, builds, force)
    for b in builds:
        b.installed = provenance.installed_distributions(b.engine or docker, b.image_id, b.platform)
        progress("listed", f"{b.platform}: {len(b.installed['distributions'])} Python distributions")
    with DockerConfigDir(client.registry, client.creds) as config_dir:
        for b in builds:
            push_platform(b.engine or docker, client, repo, tag, b, config_dir, backoff, progress)
            progress("pushed", f"{b.platform}: {client.registry}/{repo}@{b.digest}")
    for b in builds:
        with client.operation(f"attaching provenance to {b.platform}"):
            attach_provenance(b.engine or docker, client, repo, b, signer)
        signed = f", signature by {signer.keyid}" if signer else ""
        progress("attached", f"{b.platform}: sbom, manifest, provenance{signed} ({b.artifacts['referrers']})")
    body = index_bytes(builds)
    with client.operation(f"writing and reading back {tag} of {repo}"):
        index_digest = client.put_manifest(repo, tag, body, OCI_INDEX)
        progress("indexed", f"{client.registry}/{repo}:{tag} -> {index_digest}")
        read_back(client, repo, tag, builds, index_digest)
    ref = f"{client.registry}/{repo}:{tag}"
    for b in builds:
        path = b.build_dir / "manifest.json"
        manifest = read_json_file(path, "build manifest")
        record = {
            "ref": ref,
            "index": index_digest,
            "digest": b.digest,
            "pinned": f"{client.registry}/{repo}@{b.digest}",
            "artifacts": {k: v for k, v in b.artifacts.items() if k != "referrers"},
        }
        if signer is not None:
            record["keyid"] = signer.keyid
        manifest["outputs"]["published"] = [
            p for p in manifest["outputs"].get("published", []) if p.get("ref") != ref
        ] + [record]
        write_json(path, manifest)
    return {
        "ref": ref,
        "index": index_digest,
        "pinned": f"{client.registry}/{repo}@{index_digest}",
        "platforms": {b.platform: b.digest for b in builds},
        "artifacts": {b.platform: b.artifacts for b in builds},
        "keyid": signer.keyid if signer else None,
    }


def gather_builds(
    root: Path,
    recipe: str,
    platforms: list[Optional[str]],
    variant: Optional[str],
    farm: Optional[str],
    verify: bool = True,
) -> tuple[list[PlatformBuild], str]:
    """Each platform's build of the recipe, checked (manifest, image, passing verdict) on the engine
    holding it, before the registry is touched; and the recipe's name."""
    builds, name = [], recipe
    for p in platforms:
        plan = make_plan(root, recipe, BuildOptions(platform=p, variant=variant, fetching=False))
        if plan.platform not in plan.loaded.recipe.platforms:
            raise InputError(f"recipe {plan.loaded.recipe.name} does not build {plan.platform}", field="--platform")
        engine = engine_for_build(root, plan.build_dir, plan.platform, farm)
        build = check_build(engine, plan.platform, plan.build_dir, verify=verify)
        build.engine = engine
        build.lock = lock_record(lock_path(plan.loaded), root)
        builds.append(build)
        name = plan.loaded.recipe.name
    return builds, name
