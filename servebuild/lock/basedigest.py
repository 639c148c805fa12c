"""Registry digests of base image tags (for `invoke lock`): a HEAD through the bounded registry client,
anonymous (with the anonymous token a Bearer registry hands out)."""

from __future__ import annotations

from servebuild.errors import HostError
from servebuild.registry.client import RegistryClient


def split_ref(ref: str) -> tuple[str, str, str]:
    name, _, tag = ref.rpartition(":") if ":" in ref.split("/")[-1] else (ref, "", "latest")
    first = name.split("/")[0]
    if "." in first or ":" in first or first == "localhost":
        registry, repo = first, name.split("/", 1)[1]
    else:
        registry, repo = "registry-1.docker.io", name if "/" in name else f"library/{name}"
    return registry, repo, tag


def registry_digest(ref: str) -> str:
    """Digest of `ref` from its registry's HTTP API, within the client's request and operation deadlines."""
    registry, repo, tag = split_ref(ref)
    client = RegistryClient(registry, anonymous=True, retries=1)  # an offline lock records "unresolved" quickly
    with client.operation(f"looking up the digest of {ref}"):
        digest = client.head_digest(repo, tag)
    if digest is None:
        raise HostError(f"{registry} has no {repo}:{tag} (for {ref})", field="registry")
    return digest
