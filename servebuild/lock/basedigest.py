"""Anonymous registry digests of base image tags (for `invoke lock`), standard library only."""

from __future__ import annotations

import json
import re
import ssl
import urllib.request

from servebuild.errors import HostError


MANIFEST_ACCEPT = ", ".join([
    "application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json"])


def base_url(registry: str) -> str:
    # loopback registries are plain HTTP, as dockerd and BuildKit treat them
    return f"{'http' if registry.startswith(('127.', 'localhost')) else 'https'}://{registry}"


def split_ref(ref: str) -> tuple[str, str, str]:
    name, _, tag = ref.rpartition(":") if ":" in ref.split("/")[-1] else (ref, "", "latest")
    first = name.split("/")[0]
    if "." in first or ":" in first or first == "localhost":
        registry, repo = first, name.split("/", 1)[1]
    else:
        registry, repo = "registry-1.docker.io", name if "/" in name else f"library/{name}"
    return registry, repo, tag


def registry_digest(ref: str, timeout: float = 10.0) -> str:
    """Digest of `ref` from its registry's HTTP API (anonymous token where the registry asks for one)."""
    registry, repo, tag = split_ref(ref)
    url = f"{base_url(registry)}/v2/{repo}/manifests/{tag}"
    ctx = ssl.create_default_context()
    headers = {"Accept": MANIFEST_ACCEPT}
    for attempt in range(2):
        req = urllib.request.Request(url, method="HEAD", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
                digest = resp.headers.get("Docker-Content-Digest")
                if not digest:
                    raise HostError(f"{registry} gave no digest for {ref}")
                return digest
        except urllib.error.HTTPError as exc:
            challenge = exc.headers.get("WWW-Authenticate", "")
            if exc.code == 401 and attempt == 0 and challenge.startswith("Bearer"):
                params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
                token_url = f"{params['realm']}?service={params.get('service', '')}&scope={params.get('scope', '')}"
                with urllib.request.urlopen(token_url, timeout=timeout, context=ctx) as resp:
                    token = json.load(resp).get("token")
                headers["Authorization"] = f"Bearer {token}"
                continue
            raise
    raise HostError(f"{registry} refused anonymous access to {ref}")
