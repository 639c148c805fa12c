"""Build manifests: the inputs (deterministic, copied into the image) and the outputs of a build."""

from __future__ import annotations

from typing import Optional

from servebuild import PACKAGE_DIR, __version__
from servebuild.render.aot import aot_kernels
from servebuild.fsutil import canonical_json, sha256_bytes, sha256_file
from servebuild.recipe.load import LoadedRecipe
from servebuild.recipe.files import files_for
from servebuild.sources.stack import PreparedSource

MANIFEST_PATH = "/opt/servebuild/manifest.json"
LABEL_PREFIX = "io.servebuild"
SCHEMA = 2
PACKAGE = PACKAGE_DIR


def inputs_manifest(
    loaded: LoadedRecipe,
    platform: str,
    bases: dict[str, dict],
    source: Optional[PreparedSource],
    build_args: dict[str, str],
) -> dict:
    """Everything that went into the build, with hashes. No timestamps: same inputs, same bytes."""
    r = loaded.recipe
    files = [
        {
            "path": f.path,
            "kind": f.kind,
            "field": ".".join(map(str, f.loc)),
            "sha256": sha256_file(loaded.root / f.path),
        }
        for f in files_for(r, platform)
    ]
    engine = None
    if r.engine:
        engine = {
            "name": r.engine.name,
            "version": r.engine.version,
            "install": r.engine.install,
            "installed_version": source.version(r.engine.version) if source else None,
            "source": source.as_dict() if source else None,
            "subdir": r.engine.source.subdir,
            "context_files": {
                name: {"path": _shown(rel, loaded), "sha256": sha256_file(loaded.root / rel)}
                for name, rel in sorted(r.engine.mode.context_files(r.engine, platform).items())
            },
        }
    return {
        "schema": SCHEMA,
        "servebuild": __version__,
        "recipe": {
            "name": r.name,
            "sha256": loaded.sha256,
            "variant": loaded.variant,
            "files": [{"path": f.display, "sha256": f.text_sha256} for f in loaded.chain],
        },
        "platform": platform,
        "python": r.python,
        "cuda_arch_list": r.cuda_arch_list,
        "bases": bases,
        "files": files,
        "constraints": next(f for f in files if f["field"] == f"constraints.{platform}"),
        "engine": engine,
        "build_args": dict(sorted(build_args.items())),
        "launch": {
            "profiles": sorted(r.launch.profiles),
            "default": r.launch.default_profile(),
            "cache_dirs": r.launch.cache_dirs,
            "user": r.launch.user,
            "workdir": r.launch.workdir,
        },
        "expect": r.expect.model_dump(mode="json"),
        # what the aot stage compiles (the recipe's kernels, then its recordings' replayable lines);
        # outputs.aot says what it built, with each kernel's cache keys
        "aot": {
            "kernels": aot_kernels(r, loaded.root),
            "recordings": list(r.aot.recordings),
            "max_bytes": r.aot.max_bytes,
        },
    }


def _shown(rel: str, loaded: LoadedRecipe) -> str:
    """Project-relative, or servebuild-relative for servebuild's own tools (never a host path)."""
    path = (loaded.root / rel).resolve()
    for base, prefix in ((loaded.root.resolve(), ""), (PACKAGE, "servebuild/")):
        if path.is_relative_to(base):
            return prefix + str(path.relative_to(base))
    return path.name


def oci_labels(inputs: dict, created: str, project_url: str) -> dict[str, str]:
    engine = inputs.get("engine") or {}
    source = engine.get("source") or {}
    runtime = inputs["bases"]["runtime"]
    return {
        "org.opencontainers.image.source": source.get("url") or project_url,
        "org.opencontainers.image.revision": source.get("commit") or "",
        "org.opencontainers.image.version": engine.get("installed_version") or inputs["recipe"]["name"],
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.title": inputs["recipe"]["name"],
        "org.opencontainers.image.base.name": runtime.get("resolved") or runtime["ref"],
        "org.opencontainers.image.base.digest": runtime.get("digest") or runtime.get("id") or "",
        f"{LABEL_PREFIX}.recipe": inputs["recipe"]["name"],
        f"{LABEL_PREFIX}.recipe.sha256": inputs["recipe"]["sha256"],
        f"{LABEL_PREFIX}.manifest.sha256": manifest_sha256(inputs),
        f"{LABEL_PREFIX}.manifest.path": MANIFEST_PATH,
        f"{LABEL_PREFIX}.platform": inputs["platform"],
        f"{LABEL_PREFIX}.patches": ",".join(p["id"] for p in source.get("patches", [])),
        f"{LABEL_PREFIX}.cuda-arch-list": inputs["cuda_arch_list"],
        f"{LABEL_PREFIX}.variant": inputs["recipe"].get("variant") or "",
    }


def manifest_sha256(inputs: dict) -> str:
    return sha256_bytes(canonical_json(inputs).encode())
