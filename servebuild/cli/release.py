"""publish, verify: a registry holds the images, their attachments and one index under a tag."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from servebuild.build.docker import DockerClient
from servebuild.cli.options import DEFAULT_RECIPE, option, path, registry_ref, split_registry_ref
from servebuild.release import credentials, signing
from servebuild.release.publish import PUSH_S, gather_builds, publish as publish_builds
from servebuild.registry.limits import REBUILD_REGISTRY_S, seconds_from_env
from servebuild.registry.client import RegistryClient
from servebuild.release.verify import verify as verify_tag
from servebuild.release import rebuild as rebuilding
from servebuild.cli.options import default_ca_bundle
from servebuild.errors import InputError
from servebuild.platforms import PLATFORMS, host_platform, platform_list


@dataclass(frozen=True)
class PublishArgs:
    """`invoke publish`'s options, in the order invoke gives their short flags."""

    recipe: str = option(DEFAULT_RECIPE, "recipe whose builds to publish")
    registry: Optional[str] = option(None, "HOST[:PORT] of the registry")
    platform: Optional[str] = option(
        None, "platform(s) to put under the tag, comma-separated (default: the recipe's first)"
    )
    variant: Optional[str] = option(None, "A/B variant of the builds")
    repository: Optional[str] = option(None, "repository in the registry (default servebuild/RECIPE)")
    tag: Optional[str] = option(None, "tag of the OCI index (default: the variant, else latest)")
    credentials: Optional[str] = option(
        None, "JSON file {username, password}, mode 600 (default: the Docker config's auths)"
    )
    ca: Optional[str] = option(None, "PEM CA bundle the registry's certificate is checked against (private CA)")
    force: bool = option(False, "move a tag that already points at other images")
    no_verify: bool = option(False, "publish without a passing smoke verdict for each exact image")
    farm: Optional[str] = option(
        None, "farm file: push each platform from the engine that built it (default: farm.yaml, if any)"
    )
    sign_key: Optional[str] = option(
        None,
        "PEM private key file (Ed25519 or ECDSA P-256, mode 600) to sign each provenance statement "
        "with, attached as a DSSE envelope (default: $SERVEBUILD_SIGN_KEY; never the key itself)",
    )


def publish(root: Path, args: PublishArgs) -> None:
    registry, repository, variant, sign_key = args.registry, args.repository, args.variant, args.sign_key
    tag = args.tag or variant or "latest"
    registry_ref(registry, (repository or "servebuild/recipe").strip(), tag)  # the options, before any file is read
    seconds_from_env("SERVEBUILD_PUSH_TIMEOUT", PUSH_S)
    platforms = platform_list(args.platform)
    key_file, key_field = (
        (sign_key, "--sign-key") if sign_key else (os.environ.get("SERVEBUILD_SIGN_KEY"), "SERVEBUILD_SIGN_KEY")
    )
    signer = signing.load_private_key(Path(key_file), key_field) if key_file else None  # before any push
    docker = DockerClient()
    builds, recipe_name = gather_builds(root, args.recipe, platforms, variant, args.farm, verify=not args.no_verify)
    name = (repository or f"servebuild/{recipe_name}").strip()  # the recipe's name, never a path given as --recipe
    registry_ref(registry, name, tag)
    client = RegistryClient(registry, credentials.resolve(registry, path(args.credentials)), path(args.ca))
    result = publish_builds(
        docker,
        builds,
        client,
        name,
        tag,
        force=args.force,
        signer=signer,
        progress=lambda event, detail: print(f"{event}: {detail}", flush=True),
    )
    print(f"published {result['ref']}\n  index: {result['pinned']}")
    if signer:
        print(f"  provenance signed by {signer.keyid}")
    for p, digest in result["platforms"].items():
        print(f"  {p}: {registry}/{name}@{digest}")


def verify(root: Path, ref=None, credentials_file=None, ca=None, public_key=None) -> None:
    registry, name, tag = split_registry_ref(ref)
    key = signing.load_public_key(Path(public_key)) if public_key else None  # before the registry is asked
    client = RegistryClient(registry, credentials.resolve(registry, path(credentials_file)), path(ca))
    report = verify_tag(client, name, tag, root, key)
    print(f"verified {report['ref']} (index {report['index']})")
    for p, r in sorted(report["platforms"].items()):
        print(
            f"  {p}: {r['digest']} image {r['image_id'][:19]} recipe {r['recipe']} manifest "
            f"{r['manifest_sha256'][:12]} sbom {r['packages']} packages, lock {r['lock']}, {r['signature']}"
        )


def rebuild_check(
    root: Path, ref=None, platform=None, credentials_file=None, ca=None, ca_bundle=None, recipe=None, variant=None
) -> int:
    """Rebuild REF's image for one platform (default: this host's) from this checkout with --no-cache and
    compare it with the registry's: 0 identical, 1 different (the first differing layer and its paths).
    With `recipe` (--committed), compare with the recipe's committed id instead: no registry."""
    if recipe is not None:
        if ref is not None:
            raise InputError("give --check (a published tag) or --committed (a recipe), not both", field="--committed")
        platform = platform or host_platform()
        if platform not in PLATFORMS:
            raise InputError(f"unknown platform {platform!r} (one of {', '.join(PLATFORMS)})", field="--platform")
        same, rebuilt, line = rebuilding.check_committed(
            root, recipe, platform, variant, DockerClient(), path(default_ca_bundle(ca_bundle))
        )
        print(f"rebuilt {recipe}{' variant ' + variant if variant else ''} {platform} --no-cache: {rebuilt}")
        print(f"  {line}")
        return 0 if same else 1
    if variant is not None:
        raise InputError(
            "--variant goes with --committed (a published image's labels name its variant)", field="--variant"
        )
    if ref is None:
        raise InputError(
            "give the published tag (--check HOST[:PORT]/REPOSITORY:TAG) or a recipe with a committed "
            "id (--committed RECIPE)",
            field="--check",
        )
    registry, name, tag = split_registry_ref(ref)
    platform = platform or host_platform()
    if platform not in PLATFORMS:
        raise InputError(f"unknown platform {platform!r} (one of {', '.join(PLATFORMS)})", field="--platform")
    total_s = seconds_from_env("SERVEBUILD_REBUILD_DEADLINE", REBUILD_REGISTRY_S)  # before the registry is asked
    client = RegistryClient(registry, credentials.resolve(registry, path(credentials_file)), path(ca))
    report = rebuilding.check(
        root, client, name, tag, platform, DockerClient(), path(default_ca_bundle(ca_bundle)), total_s=total_s
    )
    if report.identical:
        print(
            f"rebuilt {report.ref} {platform}: identical ({report.layers} layers and the config, "
            f"image {report.registry_id})"
        )
        return 0
    print(
        f"rebuilt {report.ref} {platform}: DIFFERENT (registry image {report.registry_id}, rebuild {report.rebuilt_id})"
    )
    print("\n".join(report.difference))
    return 1
