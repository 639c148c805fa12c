"""Publish a built, smoke-tested image to a registry and verify it by digest."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .docker import DockerClient
from .fsutil import write_json
from .errors import DockerError, SmokeError
from .registry import fetch_manifest, split_ref

PUSHED = re.compile(r"digest: (sha256:[0-9a-f]{64})")


def verify_smoke(build_dir: Path, image_id: str) -> None:
    verdict_path = build_dir / "smoke" / "verdict.json"
    if not verdict_path.exists():
        raise SmokeError("no smoke verdict for this build; run `invoke test-image` first (or --no-verify)",
                         file=str(verdict_path))
    verdict = json.loads(verdict_path.read_text())
    if verdict.get("image_id") != image_id:
        raise SmokeError(f"the smoke verdict is for image {verdict.get('image_id')}, not the built {image_id}; "
                         f"run `invoke test-image` again", file=str(verdict_path))
    if not verdict.get("passed"):
        raise SmokeError("the image failed its smoke suite; it is not published", file=str(verdict_path))


def publish(docker: DockerClient, build_dir: Path, remote: str) -> dict:
    """Tag, push, then check the registry serves the pushed digest and that its config is our image."""
    manifest_path = build_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    image_id = manifest["outputs"]["image_id"]
    if docker.image_id(image_id) is None:
        raise DockerError(f"built image {image_id} is no longer in the engine; build again", field="publish")
    docker.tag(image_id, remote)
    try:
        proc = docker.run("push", remote, check=False)
        if proc.returncode != 0:
            detail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            raise DockerError(f"push of {remote} refused: {detail}; nothing was published "
                              f"(log in with `docker login {split_ref(remote)[0]}`?)", field="publish")
        m = PUSHED.search(proc.stdout)
        if not m:
            raise DockerError(f"push of {remote} reported no digest", field="publish")
        digest = m.group(1)
        served = fetch_manifest(remote, digest)
        if served["served_digest"] not in (None, digest):
            raise DockerError(f"registry serves {served['served_digest']} for {remote}, pushed {digest}",
                              field="publish")
        config_digest = served["body"].get("config", {}).get("digest")
        if config_digest != image_id:
            raise DockerError(f"the pushed manifest's config is {config_digest}, the built image is {image_id}",
                              field="publish")
    finally:
        docker.run("image", "rm", remote, check=False)  # the local alias only; the image stays
    record = {"ref": remote, "digest": digest, "pinned": f"{remote.rsplit(':', 1)[0]}@{digest}"}
    published = [p for p in manifest["outputs"].get("published", []) if p["ref"] != remote] + [record]
    manifest["outputs"]["published"] = published
    write_json(manifest_path, manifest)
    return record

