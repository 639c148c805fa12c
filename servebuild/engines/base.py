"""The engine-kind protocol and what kinds share (see engines/__init__.py for the table)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from servebuild.engines.profiles import PORT, LaunchProfile, flag_values

# Where every JIT cache lives in a serving image: one root, one `-v NAME:/cache` keeps them all.
CACHE_ROOT = "/cache"
# variable -> directory under CACHE_ROOT; each name is checked against the installed packages by the smoke suite
JIT_CACHE_ENV = {
    "TRITON_CACHE_DIR": "triton",
    "TILELANG_CACHE_DIR": "tilelang",
    "TVM_FFI_CACHE_DIR": "tvm-ffi",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "DG_JIT_CACHE_DIR": "deep_gemm",
    "HUMMING_CACHE_DIR": "humming",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
}


class EngineKind:
    name = "generic"
    port: Optional[int] = None          # default serving port (EXPOSEd; the launcher listens on it)
    serve_time_jit = False              # compiles kernels while serving: the runtime gets a toolchain
    jit_probes: tuple[str, ...] = ()    # tests/image/jit_probes.py probes the smoke suite runs
    entrypoints: tuple[str, ...] = ()   # modules whose `--help` must answer with the network off
    help_needs_gpu = False              # the server cannot even parse --help without a CUDA device
    env: dict[str, str] = {}            # runtime environment defaults (profiles may override)
    # a hook that stops the server right after its own argument parser (engines/<kind>/argcheck.py):
    # every launch profile is parsed by the pinned engine while the image builds
    argcheck: Optional[Path] = None
    health_path: Optional[str] = None   # the server's health endpoint: the image's HEALTHCHECK
    # HEALTHCHECK failures do not count while a server loads its model and compiles (DSV4: minutes)
    health_start_period = 1800

    def listen_args(self, profile: LaunchProfile) -> list[str]:
        """Flags that make the server listen on all interfaces at its port, unless the profile sets them."""
        flags = flag_values(profile.args + profile.extra_args)
        port = profile.port or self.port
        out = []
        if "--host" not in flags and port is not None:
            out += ["--host", "0.0.0.0"]
        if "--port" not in flags and port is not None:
            out += ["--port", str(port)]
        return out

    def check_profile(self, name: str, profile: LaunchProfile) -> None:
        """Engine-specific rules; raise ValueError naming the profile."""

    def runtime_env(self) -> dict[str, str]:
        env = dict(self.env)
        if self.serve_time_jit:
            env.update({k: f"{CACHE_ROOT}/{v}" for k, v in JIT_CACHE_ENV.items()})
        return env

    def profile_port(self, profile: LaunchProfile) -> Optional[int]:
        flags = flag_values(profile.args + profile.extra_args)
        given = (flags.get("--port") or [None])[0]
        return int(given) if given and PORT.fullmatch(given) else (profile.port or self.port)


def check_dspark_block(name: str, block: Optional[int], proposals: int, what: str) -> None:
    if block is None:
        raise ValueError(f"profile {name!r}: DSpark needs dspark_block_size (the model's block size)")
    if proposals < block:
        raise ValueError(f"profile {name!r}: {what} is {proposals}, below the DSpark block size {block}")
