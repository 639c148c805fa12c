"""`invoke verify REF`: check a published tag end to end.

index -> each platform digest -> its image config (platform, io.servebuild.* labels) -> the artifacts
attached to that digest (exactly one SBOM, build manifest and provenance statement, each naming the
digest as its subject; every byte checked against its digest) -> the build manifest hashes to the
image's label -> the SBOM holds what the build installed -> the statement names those artifacts, the
recipe of the label and the lock -> the project's lock file for that recipe, if there is one.
With a public key, each platform must also carry a DSSE envelope whose signature verifies under that
key and whose payload is byte for byte the attached statement (checked before the statement's content);
without one, the keyids of attached envelopes are reported, not checked.
The first problem is one line (exit 2).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from servebuild.release import signing
from servebuild.errors import IntegrityError, ServebuildError
from servebuild.fsutil import sha256_bytes, sha256_file
from servebuild.build.manifest import LABEL_PREFIX, manifest_sha256
from servebuild.release.provenance import ARTIFACT_TYPES, SIGNATURE_TYPE, SLSA_PREDICATE, ArtifactError, read_artifact
from servebuild.registry.bounded import BadJSON, parse_json
from servebuild.registry.limits import JSON_DEPTH
from servebuild.registry.client import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST, RegistryClient


KEYID_SHOWN = re.compile(r"[\x21-\x7e]{1,100}")  # keyids come from the registry: printable, bounded, or quoted


class VerifyError(IntegrityError):
    """A published tag does not check out."""


def _name(n: str) -> str:
    return re.sub(r"[-_.]+", "-", n).lower()


def _json(data: bytes, what: str) -> dict:
    try:
        doc = parse_json(data, what, JSON_DEPTH)
    except BadJSON as exc:
        raise VerifyError(exc.problem) from None
    if not isinstance(doc, dict):
        raise VerifyError(f"{what} is not a JSON object")
    return doc


def verify(
    client: RegistryClient,
    repo: str,
    tag: str,
    root: Optional[Path] = None,
    public_key: Optional[signing.PublicKey] = None,
) -> dict:
    ref = f"{client.registry}/{repo}:{tag}"
    with client.operation(f"verify of {ref}"):
        return _verify(client, repo, tag, ref, root, public_key)


def _verify(
    client: RegistryClient, repo: str, tag: str, ref: str, root: Optional[Path], public_key: Optional[signing.PublicKey]
) -> dict:
    found = client.get_manifest(repo, tag)
    if found is None:
        raise VerifyError(f"{ref}: no such tag")
    body, index_digest, media = found
    if media not in (OCI_INDEX, DOCKER_LIST):
        raise VerifyError(f"{ref}: is a {media}, not an image index (publish writes an OCI index)")
    index = _json(body, f"{ref} index")
    entries = index.get("manifests") or []
    if not entries:
        raise VerifyError(f"{ref}: the index names no images")
    report = {"ref": ref, "index": index_digest, "platforms": {}}
    seen = set()
    for entry in entries:
        p = entry.get("platform") or {}
        platform = f"{p.get('os')}/{p.get('architecture')}"
        if platform in seen:
            raise VerifyError(f"{ref}: {platform} appears twice in the index")
        seen.add(platform)
        report["platforms"][platform] = _verify_platform(
            client, repo, ref, platform, entry.get("digest", ""), root, public_key
        )
    return report


def _verify_platform(
    client: RegistryClient,
    repo: str,
    ref: str,
    platform: str,
    digest: str,
    root: Optional[Path],
    public_key: Optional[signing.PublicKey],
) -> dict:
    where = f"{ref} {platform}"
    config_digest, labels = _image_labels(client, repo, where, platform, digest)
    referrers, _ = client.referrers(repo, digest)
    artifacts = _artifacts(client, repo, where, digest, referrers)
    signature = _signature(client, repo, where, digest, referrers, artifacts["provenance"], public_key)
    manifest = _check_build_manifest(artifacts, where, labels, config_digest)
    installed = _check_sbom(artifacts, where, digest, manifest)
    lock = _check_provenance(artifacts, where, digest, labels)
    lock_state = _check_lock(where, lock, root, labels[f"{LABEL_PREFIX}.recipe"])
    return {
        "digest": digest,
        "image_id": config_digest,
        "recipe": labels[f"{LABEL_PREFIX}.recipe"],
        "manifest_sha256": labels[f"{LABEL_PREFIX}.manifest.sha256"],
        "packages": len(installed),
        "lock": lock_state,
        "signature": signature,
    }


def _image_labels(client: RegistryClient, repo: str, where: str, platform: str, digest: str) -> tuple[str, dict]:
    """The image's config digest and labels, after checking it is an image of the platform."""
    found = client.get_manifest(repo, digest)
    if found is None:
        raise VerifyError(f"{where}: the index names {digest}, which the registry does not have")
    if found[2] not in (OCI_MANIFEST, DOCKER_MANIFEST):
        raise VerifyError(f"{where}: {digest} is a {found[2]}, not an image manifest")
    image = _json(found[0], f"{where} manifest")
    config_digest = (image.get("config") or {}).get("digest", "")
    config = _json(client.get_blob(repo, config_digest), f"{where} image config")
    actual = f"{config.get('os')}/{config.get('architecture')}"
    if actual != platform:
        raise VerifyError(f"{where}: the index entry's image {digest} is a {actual} image")
    labels = (config.get("config") or {}).get("Labels") or {}
    for key in ("manifest.sha256", "recipe", "recipe.sha256", "platform"):
        if not labels.get(f"{LABEL_PREFIX}.{key}"):
            raise VerifyError(f"{where}: image {digest} has no label {LABEL_PREFIX}.{key}")
    if labels[f"{LABEL_PREFIX}.platform"] != platform:
        raise VerifyError(f"{where}: image {digest} is labelled {labels[f'{LABEL_PREFIX}.platform']}")
    return config_digest, labels


def _check_build_manifest(artifacts: dict, where: str, labels: dict, config_digest: str) -> dict:
    manifest = _json(artifacts["manifest"], f"{where} attached build manifest")
    inputs = {k: v for k, v in manifest.items() if k != "outputs"}
    if manifest_sha256(inputs) != labels[f"{LABEL_PREFIX}.manifest.sha256"]:
        raise VerifyError(
            f"{where}: the attached build manifest hashes to {manifest_sha256(inputs)}, the image's "
            f"label {LABEL_PREFIX}.manifest.sha256 says {labels[f'{LABEL_PREFIX}.manifest.sha256']}"
        )
    if (manifest.get("outputs") or {}).get("image_id") != config_digest:
        raise VerifyError(
            f"{where}: the attached build manifest is for image "
            f"{(manifest.get('outputs') or {}).get('image_id')}, the index names {config_digest}"
        )
    return manifest


def _check_sbom(artifacts: dict, where: str, digest: str, manifest: dict) -> set:
    sbom = _json(artifacts["sbom"], f"{where} attached SBOM")
    component = (sbom.get("metadata") or {}).get("component") or {}
    if sbom.get("bomFormat") != "CycloneDX" or component.get("version") != digest:
        raise VerifyError(f"{where}: the attached SBOM is not a CycloneDX SBOM of {digest}")
    installed = {(_name(c.get("name", "")), c.get("version")) for c in sbom.get("components") or []}
    for pin in (manifest.get("outputs") or {}).get("packages") or []:
        name, _, version = pin.partition("==")
        if version and (_name(name), version) not in installed:
            raise VerifyError(f"{where}: the SBOM lacks {name}=={version}, which the build manifest lists")
    return installed


def _check_provenance(artifacts: dict, where: str, digest: str, labels: dict):
    """Check the SLSA statement against the image and the other artifacts; return the lock it names."""
    statement = _json(artifacts["provenance"], f"{where} attached provenance")
    subjects = [s.get("digest", {}).get("sha256") for s in statement.get("subject") or []]
    if statement.get("predicateType") != SLSA_PREDICATE or subjects != [digest.split(":", 1)[1]]:
        raise VerifyError(f"{where}: the provenance statement is not SLSA provenance for {digest}")
    predicate = statement.get("predicate") or {}
    params = (predicate.get("buildDefinition") or {}).get("externalParameters") or {}
    if (params.get("recipe") or {}).get("sha256") != labels[f"{LABEL_PREFIX}.recipe.sha256"]:
        raise VerifyError(
            f"{where}: the provenance names recipe sha256 {(params.get('recipe') or {}).get('sha256')}, "
            f"the image label says {labels[f'{LABEL_PREFIX}.recipe.sha256']}"
        )
    byproducts = {
        b.get("name"): b.get("digest", {}).get("sha256")
        for b in (predicate.get("runDetails") or {}).get("byproducts") or []
    }
    for kind in ("sbom", "manifest"):
        if byproducts.get(kind) != sha256_bytes(artifacts[kind]):
            raise VerifyError(
                f"{where}: the provenance names {kind} sha256:{byproducts.get(kind)}, the attached "
                f"{kind} is sha256:{sha256_bytes(artifacts[kind])}"
            )
    return params.get("lock")


def _artifacts(client: RegistryClient, repo: str, where: str, digest: str, referrers: list[dict]) -> dict[str, bytes]:
    out = {}
    for kind, artifact_type in ARTIFACT_TYPES.items():
        matching = [d for d in referrers if d.get("artifactType") == artifact_type]
        if len(matching) != 1:
            raise VerifyError(f"{where}: {len(matching)} {kind} artifacts are attached to {digest}, want exactly 1")
        out[kind] = _artifact_blob(client, repo, where, digest, kind, matching[0])
    return out


def _artifact_blob(client: RegistryClient, repo: str, where: str, digest: str, kind: str, desc: dict) -> bytes:
    """The one layer of the artifact `desc` names, after checking it is a `kind` artifact about `digest`."""
    try:
        return read_artifact(client, repo, digest, kind, desc)
    except ArtifactError as exc:
        raise VerifyError(f"{where}: {exc.problem}") from None


def _signature(
    client: RegistryClient,
    repo: str,
    where: str,
    digest: str,
    referrers: list[dict],
    statement: bytes,
    public_key: Optional[signing.PublicKey],
) -> str:
    signed = [d for d in referrers if d.get("artifactType") == SIGNATURE_TYPE]
    if public_key is None:
        return _signature_note(client, repo, where, digest, signed)
    envelopes = [_artifact_blob(client, repo, where, digest, "signature", d) for d in signed]
    return _check_signature(envelopes, where, digest, statement, public_key)


def _signature_note(client: RegistryClient, repo: str, where: str, digest: str, signed: list[dict]) -> str:
    """No key to check against: which keyids the attached envelopes name, never a failure."""
    keyids = []
    for desc in signed:
        try:
            keyids += signing.parse_envelope(_artifact_blob(client, repo, where, digest, "signature", desc)).keyids
        except ServebuildError:  # a broken envelope fails only a check against a key
            keyids.append("(unreadable envelope)")
    if not keyids:
        return "unsigned"
    shown = [k if KEYID_SHOWN.fullmatch(k) else f"(keyid {k[:40]!r})" if k else "(no keyid)" for k in keyids]
    return f"signature by {', '.join(shown)} attached, not checked (give --public-key)"


def _check_signature(
    envelopes: list[bytes], where: str, digest: str, statement: bytes, public_key: signing.PublicKey
) -> str:
    """One attached envelope must verify under the key and sign exactly the attached statement (other
    envelopes, e.g. by other keys, may sit beside it); else the most telling problem, one line."""
    if not envelopes:
        raise VerifyError(
            f"{where}: no signed provenance attached to {digest} (want a DSSE envelope signed by {public_key.keyid})"
        )
    problems = []
    for data in envelopes:
        try:
            envelope = signing.verify_envelope(data, public_key)
        except signing.BadSignature:
            problems.append((2, f"the provenance signature does not verify under {public_key.keyid}"))
            continue
        except signing.SigningError as exc:  # not an envelope at all
            problems.append((3, f"the signature artifact {exc.problem}"))
            continue
        if envelope.payload_type != signing.PAYLOAD_TYPE:
            problems.append(
                (0, f"the signed payload type is {envelope.payload_type[:80]!r}, not {signing.PAYLOAD_TYPE}")
            )
        elif envelope.payload != statement:
            problems.append(
                (
                    1,
                    f"the signed payload is not the attached statement (signed sha256:"
                    f"{sha256_bytes(envelope.payload)}, attached sha256:{sha256_bytes(statement)})",
                )
            )
        else:
            return f"signed by {public_key.keyid}, verified"
    raise VerifyError(f"{where}: {min(problems)[1]}")


def _check_lock(where: str, lock: Optional[dict], root: Optional[Path], recipe: str) -> str:
    project_lock = root / "recipes" / f"{recipe}.lock.yaml" if root else None
    if lock is None:
        if project_lock is not None and project_lock.is_file():
            raise VerifyError(f"{where}: published without a lock, but the project has {project_lock}")
        return "none"
    if project_lock is None or not project_lock.is_file():
        return f"{lock.get('path')} sha256:{lock.get('sha256')} (no project lock to compare)"
    actual = sha256_file(project_lock)
    if actual != lock.get("sha256"):
        raise VerifyError(
            f"{where}: the provenance names lock {lock.get('path')} sha256:{lock.get('sha256')}, "
            f"the project's {project_lock} is sha256:{actual}"
        )
    return f"{lock.get('path')} sha256:{actual} (matches the project's)"
