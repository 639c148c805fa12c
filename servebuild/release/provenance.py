"""Provenance beside a published image: a CycloneDX SBOM of the image's Python environment, the build
manifest, and an in-toto statement with an SLSA provenance predicate, attached to the image's digest
as OCI artifacts (manifests with a `subject`). Integrity comes from digests, which `invoke verify`
checks; with a signing key, publish also attaches a DSSE envelope signing the statement's exact bytes
(signing.py). Nothing here holds a credential, a CA bundle, a token or a key.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Optional
from urllib.parse import quote

from servebuild import __version__
from servebuild.errors import DockerError, IntegrityError
from servebuild.fsutil import sha256_bytes
from servebuild.registry.limits import ARTIFACT_BYTES
from servebuild.registry.client import (
    EMPTY_JSON,
    OCI_EMPTY,
    OCI_INDEX,
    OCI_MANIFEST,
    RegistryClient,
    RegistryError,
    canonical_bytes,
    referrers_tag,
)
from servebuild.release.signing import ENVELOPE_TYPE

SBOM_TYPE = "application/vnd.cyclonedx+json"
MANIFEST_TYPE = "application/vnd.servebuild.manifest.v1+json"
STATEMENT_TYPE = "application/vnd.in-toto+json"
ARTIFACT_TYPES = {"sbom": SBOM_TYPE, "manifest": MANIFEST_TYPE, "provenance": STATEMENT_TYPE}  # always attached
SIGNATURE_TYPE = ENVELOPE_TYPE  # the DSSE envelope of the statement, attached when publish has a signing key
ALL_TYPES = {**ARTIFACT_TYPES, "signature": SIGNATURE_TYPE}
SLSA_PREDICATE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://github.com/servebuild/servebuild/build/v1"
TITLE = "org.opencontainers.image.title"
PLAIN_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # an attached file's name, as saved by any client
EMPTY_DESCRIPTOR = {"mediaType": OCI_EMPTY, "digest": "sha256:" + sha256_bytes(EMPTY_JSON), "size": len(EMPTY_JSON)}

# Run by the image's own python3 in a container without network: what is installed, not what was asked for.
LIST_DISTRIBUTIONS = r"""
import importlib.metadata as m, json, sys
out = {}
for d in m.distributions():
    name = d.metadata.get("Name")
    if not name:
        continue
    lic = d.metadata.get("License-Expression") or d.metadata.get("License") or ""
    out[(name.lower(), d.version)] = {"name": name, "version": d.version,
                                      "license": lic.splitlines()[0][:200] if lic.strip() else ""}
print(json.dumps({"python": sys.version.split()[0], "distributions": [out[k] for k in sorted(out)]}))
"""


def installed_distributions(docker, image_id: str, platform: str) -> dict:
    out = docker.run_in_image(image_id, "-c", LIST_DISTRIBUTIONS, platform=platform, entrypoint="python3")
    try:
        data = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise DockerError(f"listing the Python distributions of {image_id[:19]} gave no JSON", field="sbom") from None
    return data


def purl(name: str, version: str) -> str:
    return f"pkg:pypi/{quote(name.lower().replace('_', '-'))}@{quote(version, safe='+')}"


def cyclonedx(installed: dict, repo: str, digest: str, platform: str, image_id: str) -> dict:
    """CycloneDX 1.5 JSON, deterministic (no timestamp; serial number derived from the digest)."""
    components = []
    for d in installed["distributions"]:
        ref = purl(d["name"], d["version"])
        component = {"type": "library", "bom-ref": ref, "name": d["name"], "version": d["version"], "purl": ref}
        if d.get("license"):
            component["licenses"] = [{"license": {"name": d["license"]}}]
        components.append(component)
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'servebuild-sbom:{repo}@{digest}')}",
        "version": 1,
        "metadata": {
            "tools": {"components": [{"type": "application", "name": "servebuild", "version": __version__}]},
            "component": {
                "type": "container",
                "bom-ref": f"{repo}@{digest}",
                "name": repo,
                "version": digest,
                "properties": [
                    {"name": "servebuild:platform", "value": platform},
                    {"name": "servebuild:image_id", "value": image_id},
                    {"name": "servebuild:python", "value": installed.get("python", "")},
                ],
            },
        },
        "components": components,
    }


def attached_manifest(manifest: dict) -> dict:
    """The build manifest as attached: what the build wrote, without publish records (they change on
    every publish and would make a re-push attach different bytes)."""
    doc = json.loads(json.dumps(manifest))
    doc.get("outputs", {}).pop("published", None)
    return doc


def statement(manifest: dict, repo: str, digest: str, lock: Optional[dict], attached: dict[str, str]) -> dict:
    """in-toto Statement v1 with an SLSA provenance v1 predicate for one platform image."""
    outputs = manifest.get("outputs", {})
    engine = manifest.get("engine") or {}
    source = engine.get("source") or {}
    deps = []
    if source.get("url"):
        deps.append(
            {
                "uri": f"git+{source['url']}@{source.get('commit')}",
                "digest": {"gitCommit": source.get("commit")},
                "name": "engine-source",
            }
        )
    for p in source.get("patches", []):
        deps.append(
            {
                "name": f"patch:{p['id']}",
                "uri": p.get("file") or f"pr:{p.get('pr')}",
                "digest": {k: v for k, v in (("sha256", p.get("sha256")), ("gitCommit", p.get("commit"))) if v},
            }
        )
    if source.get("tarball_sha256"):
        deps.append({"name": "engine-source-tarball", "digest": {"sha256": source["tarball_sha256"]}})
    for stage, base in sorted((manifest.get("bases") or {}).items()):
        pinned = base.get("digest") or base.get("id") or ""  # the registry digest, else the local image id
        deps.append(
            {
                "name": f"base:{stage}",
                "uri": base.get("resolved") or base.get("ref"),
                "digest": {"sha256": pinned.split(":", 1)[1]} if ":" in pinned else {},
                "annotations": {"local_id": base.get("id") or "", "registry_digest": base.get("digest") or ""},
            }
        )
    for f in manifest.get("files", []):
        deps.append({"name": f"file:{f['field']}", "uri": f["path"], "digest": {"sha256": f["sha256"]}})
    recipe = manifest.get("recipe") or {}
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": repo, "digest": {"sha256": digest.split(":", 1)[1]}}],
        "predicateType": SLSA_PREDICATE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "recipe": {
                        "name": recipe.get("name"),
                        "sha256": recipe.get("sha256"),
                        "variant": recipe.get("variant"),
                        "files": recipe.get("files", []),
                    },
                    "platform": manifest.get("platform"),
                    "lock": lock,
                },
                "internalParameters": {
                    "servebuild": manifest.get("servebuild"),
                    "build_args": manifest.get("build_args", {}),
                },
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": {
                    "id": f"servebuild/{manifest.get('servebuild')}",
                    "version": {"docker-engine": (outputs.get("engine") or {}).get("server_version", "")},
                },
                "metadata": {"invocationId": outputs.get("image_id"), "startedOn": outputs.get("created")},
                "byproducts": [
                    {"name": kind, "digest": {"sha256": d.split(":", 1)[1]}, "mediaType": ARTIFACT_TYPES[kind]}
                    for kind, d in sorted(attached.items())
                ],
            },
        },
    }


class ArtifactError(IntegrityError):
    """An attached artifact is missing, is about another image, or is not one layer of the expected type."""


def read_artifact(client: RegistryClient, repo: str, subject_digest: str, kind: str, desc: dict) -> bytes:
    """The one layer of the artifact `desc` names (a referrers entry), after checking that it is an
    artifact of `kind`'s type whose subject is `subject_digest`."""
    artifact_type = ALL_TYPES[kind]
    found = client.get_manifest(repo, desc.get("digest", ""))
    if found is None:
        raise ArtifactError(f"the {kind} artifact {desc.get('digest')} is listed but not in the registry")
    try:
        art = json.loads(found[0])
    except ValueError:
        raise ArtifactError(f"{kind} artifact manifest is not JSON") from None
    if not isinstance(art, dict):
        raise ArtifactError(f"{kind} artifact manifest is not a JSON object")
    if (art.get("subject") or {}).get("digest") != subject_digest or art.get("artifactType") != artifact_type:
        raise ArtifactError(f"the {kind} artifact {found[1]} is not a {artifact_type} about {subject_digest}")
    layers = art.get("layers") or []
    if len(layers) != 1 or not isinstance(layers[0], dict):
        raise ArtifactError(f"the {kind} artifact {found[1]} has {len(layers)} layers, want 1")
    annotations = layers[0].get("annotations")
    title = annotations.get(TITLE, "") if isinstance(annotations, dict) else ""
    if title and not (isinstance(title, str) and PLAIN_FILE_NAME.fullmatch(title) and ".." not in title):
        raise ArtifactError(
            f"the {kind} artifact {found[1]} names its file {str(title)[:80]!r}: not a plain file "
            f"name (a path that could leave the folder it is saved in)"
        )
    return client.get_blob(repo, str(layers[0].get("digest", "")), limit=ARTIFACT_BYTES)


def attach(client: RegistryClient, repo: str, subject: dict, kind: str, payload: bytes, filename: str) -> dict:
    """Upload one artifact manifest whose subject is `subject`; return its descriptor for the referrers index."""
    artifact_type = ALL_TYPES[kind]
    client.put_blob(repo, EMPTY_JSON)
    layer = {"mediaType": artifact_type, **client.put_blob(repo, payload), "annotations": {TITLE: filename}}
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": EMPTY_DESCRIPTOR,
        "layers": [layer],
        "subject": {"mediaType": subject["mediaType"], "digest": subject["digest"], "size": subject["size"]},
        "annotations": {"io.servebuild.artifact": kind},
    }
    body = canonical_bytes(manifest)
    digest = client.put_manifest(repo, "sha256:" + sha256_bytes(body), body, OCI_MANIFEST)
    return {
        "mediaType": OCI_MANIFEST,
        "digest": digest,
        "size": len(body),
        "artifactType": artifact_type,
        "annotations": {"io.servebuild.artifact": kind},
    }


def register_referrers(client: RegistryClient, repo: str, subject_digest: str, descriptors: list[dict]) -> str:
    """Where the registry has no referrers API (distribution 2.8), keep the OCI 1.1 fallback index under
    the tag `sha256-<hex>`: existing entries stay, ours are added once (a re-push changes nothing)."""
    existing, api = client.referrers(repo, subject_digest)
    if api:
        missing = {d["digest"] for d in descriptors} - {d.get("digest") for d in existing}
        if missing:
            raise RegistryError(
                f"the registry's referrers API does not list {sorted(missing)[0]} for {subject_digest}",
                field="registry",
            )
        return "api"
    known = {d.get("digest") for d in existing}
    merged = existing + [d for d in descriptors if d["digest"] not in known]
    if len(merged) != len(existing) or not existing:
        body = canonical_bytes({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": merged})
        client.put_manifest(repo, referrers_tag(subject_digest), body, OCI_INDEX)
    return "tag"
