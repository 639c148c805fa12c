"""Run the testinfra smoke suite (tests/image) against an image or any host testinfra reaches."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Optional

from servebuild import PROJECT_DIR
from servebuild.build.docker import DockerClient
from servebuild.engines import CACHE_ROOT, kind_for
from servebuild.errors import SmokeError
from servebuild.fsutil import write_json
from servebuild.build.manifest import MANIFEST_PATH
from servebuild.render.payload import IMAGE_TOOLS
from servebuild.recipe.load import LoadedRecipe

SUITE = PROJECT_DIR / "tests" / "image"


def expectations(
    loaded: Optional[LoadedRecipe],
    manifest: Optional[dict],
    image: bool,
    labels: Optional[dict] = None,
    volumes: Optional[list] = None,
) -> dict:
    """What the suite checks, from the recipe (preferred) or the manifest inside the image."""
    if loaded is not None:
        r = loaded.recipe
        expect = r.expect.model_dump(mode="json")
        expect["aot"] = [k.model_dump(mode="json") for k in r.aot.kernels]
        name, profiles = r.name, sorted(r.launch.profiles)
        launch = {"user": r.launch.user, "workdir": r.launch.workdir, "cache_dirs": r.launch.cache_dirs}
        source = {
            "source_commit": r.engine.source.commit if r.engine else None,
            "patches": [p.id for p in r.engine.source.patches] if r.engine else [],
        }
        engine_name = r.engine.name if r.engine else None
    elif manifest is not None:
        expect = {**manifest["expect"], "aot": (manifest.get("aot") or {}).get("kernels", [])}
        name, profiles = manifest["recipe"]["name"], manifest["launch"]["profiles"]
        launch = {k: manifest["launch"][k] for k in ("user", "workdir", "cache_dirs")}
        src = (manifest.get("engine") or {}).get("source") or {}
        source = {"source_commit": src.get("commit"), "patches": [p["id"] for p in src.get("patches", [])]}
        engine_name = (manifest.get("engine") or {}).get("name")
    else:
        raise SmokeError("need a recipe or an image with a servebuild manifest", field="--recipe")
    if engine_name:  # an engine image always proves its engine: an `expect: {}` would skip every check and PASS
        version = r.engine.version if loaded is not None else (manifest.get("engine") or {}).get("version")
        expect = {
            **expect,
            "imports": list(expect.get("imports") or [])
            + ([] if engine_name in (expect.get("imports") or []) else [engine_name]),
        }
        if version and engine_name not in (expect.get("versions") or {}):
            expect["versions"] = {**(expect.get("versions") or {}), engine_name: version}
    kind = kind_for(engine_name) if engine_name else None
    if kind is not None:  # the engine kind's own checks: JIT paths, entry points, cache environment
        cache_env = {k: v for k, v in kind.runtime_env().items() if v.startswith(CACHE_ROOT)}
        expect = {
            **expect,
            "jit": list(kind.jit_probes),
            "entrypoints": list(kind.entrypoints),
            "help_needs_gpu": kind.help_needs_gpu,
            "profile_check": kind.argcheck is not None,  # its builds parse every profile (argcheck)
            # render/payload.py's row: the kinds that compile while serving carry the image's tools
            "info_tool": f"{IMAGE_TOOLS}/servebuild_info.py" if image and kind.serve_time_jit else None,
            "cache_env": cache_env if image else {},
            "cache_paths": kind.resolved_cache_paths() if image else {},
        }
        launch["cache_dirs"] = sorted(set(launch["cache_dirs"]) | (set(cache_env.values()) if image else set()))
    installed = ((manifest or {}).get("engine") or {}).get("installed_version")
    return {
        **expect,
        **launch,
        "recipe": name,
        "profiles": profiles if image else [],
        "engine": {"dist": engine_name, "installed_version": installed},
        "image": image,
        "python": "/opt/venv/bin/python" if image else None,
        "manifest_path": MANIFEST_PATH,
        "manifest": {"recipe": name, **source},
        "labels": labels,
        "volumes": volumes or [],
    }


def find_cuobjdump() -> Optional[str]:
    on_path = shutil.which("cuobjdump")
    if on_path:
        return on_path
    try:
        import nvidia  # the nvidia-cuda-cuobjdump wheel

        for root in getattr(nvidia, "__path__", []):
            for candidate in Path(root).glob("*/bin/cuobjdump"):
                return str(candidate)
    except ImportError:
        pass
    return None


def run_suite(
    hosts: str,
    expect: dict,
    out_dir: Path,
    require_gpu: bool = False,
    python: Optional[str] = None,
    extra: tuple[str, ...] = (),
    engine_env: Optional[dict[str, str]] = None,
) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    expect_path = out_dir / "smoke-expect.json"
    write_json(expect_path, expect)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(SUITE),
        f"--hosts={hosts}",
        f"--expect={expect_path}",
        f"--junitxml={out_dir / 'smoke-junit.xml'}",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--rootdir={SUITE}",
        f"--confcutdir={SUITE}",
        "-o",
        "testpaths=",
        "-o",
        "addopts=",
    ]
    cuobjdump = find_cuobjdump()
    if cuobjdump:
        cmd.append(f"--cuobjdump={cuobjdump}")
    if require_gpu:
        cmd.append("--require-gpu")
    if python:
        cmd.append(f"--python={python}")
    cmd += list(extra)
    base = engine_env or dict(os.environ)  # an ssh:// engine's PATH leads with its ssh shim: keep it
    env = {**base, "PATH": f"{Path(sys.executable).parent}:{base.get('PATH', '')}"}
    return subprocess.run(cmd, env=env).returncode


def has_nvidia_runtime(docker: DockerClient) -> bool:
    info = docker.info()
    return "nvidia" in (info.get("Runtimes") or {})


def test_image(
    docker: DockerClient,
    image: str,
    loaded: Optional[LoadedRecipe],
    out_dir: Path,
    require_gpu: bool = False,
    network: bool = False,
    extra: tuple[str, ...] = (),
    env: Optional[dict[str, str]] = None,
) -> int:
    """Start a throwaway container of `image` (with `env` over the image's environment), run the suite
    in it, remove it."""
    if docker.image_id(image) is None:
        raise SmokeError(f"image {image} is not in the engine; build it first (invoke build)", field="--image")
    info = docker.image_inspect(image)
    labels = info.get("Config", {}).get("Labels") or {}
    volumes = sorted((info.get("Config", {}).get("Volumes") or {}).keys())
    raw = docker.run("run", "--rm", "--network", "none", "--entrypoint", "/bin/cat", image, MANIFEST_PATH, check=False)
    if raw.returncode != 0 and loaded is None:
        raise SmokeError(f"{image} has no {MANIFEST_PATH}; pass --recipe to say what to expect", field="--image")
    try:
        manifest = json.loads(raw.stdout) if raw.returncode == 0 else None
    except ValueError:
        manifest = None  # a tampered manifest: the suite's manifest checks report it
    expect = expectations(loaded, manifest, image=True, labels=labels, volumes=volumes)
    name = f"servebuild-smoke-{uuid.uuid4().hex[:12]}"
    args = [
        "run",
        "-d",
        "--name",
        name,
        "--platform",
        f"linux/{info.get('Architecture')}",
        "--entrypoint",
        "/bin/sleep",
    ]
    if not network:
        args += ["--network", "none"]
    for key, value in sorted((env or {}).items()):
        args += ["-e", f"{key}={value}"]
    if has_nvidia_runtime(docker):
        args += ["--gpus", "all"]
    docker.run(*args, image, "infinity")
    try:
        # a farm engine: the suite's docker:// backend must reach the same engine (DOCKER_HOST, TLS)
        code = run_suite(
            f"docker://{name}",
            expect,
            out_dir,
            require_gpu=require_gpu,
            extra=extra,
            engine_env=docker._env() if docker.endpoint else None,
        )
    finally:
        docker.remove_container(name)
    write_json(
        out_dir / "verdict.json",
        {"image": image, "image_id": info["Id"], "passed": code == 0, "require_gpu": require_gpu},
    )
    return code
