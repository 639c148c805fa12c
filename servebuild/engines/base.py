"""The engine-kind protocol and what kinds share (see engines/__init__.py for the table)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from servebuild.engines.profiles import PORT, LaunchProfile, check_common, profile_flags

# Where every JIT cache lives in a serving image: one root, one `-v NAME:/cache` keeps them all.
CACHE_ROOT = "/cache"
# variable -> directory under CACHE_ROOT, for every kind that compiles while serving; the smoke suite
# proves where each lands by the installed packages' own resolution (tests/image/cache_paths.py)
JIT_CACHE_ENV = {
    "TRITON_CACHE_DIR": "triton",
    "TILELANG_CACHE_DIR": "tilelang",
    "TVM_FFI_CACHE_DIR": "tvm-ffi",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "DG_JIT_CACHE_DIR": "deep_gemm",
    "HUMMING_CACHE_DIR": "humming",
    "HUMMING_TMP_DIR": "humming/tmp",  # humming's compiled modules (default ~/.humming/tmp)
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "HF_HOME": "huggingface",  # hub downloads, tokenizers, xet chunks (default ~/.cache/huggingface)
}
# the resolvers of tests/image/cache_paths.py that every such kind's image must pass: name -> dir under CACHE_ROOT
JIT_CACHE_PATHS = {
    "triton": "triton",
    "tvm-ffi": "tvm-ffi",
    "tilelang": "tilelang",
    "flashinfer": "flashinfer",
    "inductor": "inductor",
    "humming": "humming",
    "huggingface": "huggingface",
}


@dataclass(frozen=True)
class Defect:
    """A known defect of some releases of an engine that a launch profile can meet. A patch entry lifts
    it by naming it in its `fixes`; the kind's `check_defects` says which profiles meet it."""

    versions: str  # PEP 440 specifiers of the affected releases, e.g. ">=0.5.16,<0.5.18"
    why: str  # one line: what goes wrong, where, and where upstream fixed it
    fix: str  # what to do: the local patch that fixes it, or the release that does

    def affects(self, version: str) -> bool:
        return Version(version) in SpecifierSet(self.versions)


class EngineKind:
    name = "generic"
    port: Optional[int] = None  # default serving port (EXPOSEd; the launcher listens on it)
    serve_time_jit = False  # compiles kernels while serving: the runtime gets a toolchain
    jit_probes: tuple[str, ...] = ()  # tests/image/jit_probes.py probes the smoke suite runs
    entrypoints: tuple[str, ...] = ()  # modules whose `--help` must answer with the network off
    help_needs_gpu = False  # the server cannot even parse --help without a CUDA device
    env: dict[str, str] = {}  # runtime environment defaults (profiles may override)
    cache_env: dict[str, str] = {}  # the kind's own cache variables -> directory under CACHE_ROOT
    cache_paths: dict[str, str] = {}  # the kind's own resolvers (tests/image/cache_paths.py) -> dir under CACHE_ROOT
    # JIT kinds a recipe's `aot.kernels` may compile at build time (tools/aot_build.py) -> the module
    # prefix their builders live under
    aot_jits: dict[str, str] = {}
    # a hook that stops the server right after its own argument parser (engines/<kind>/argcheck.py):
    # every launch profile is parsed by the pinned engine while the image builds
    argcheck: Optional[Path] = None
    # What a variant's patches must touch for the build-time stages to need the patched engine
    # (render/reuse.py): paths in the installed site (`sglang/...`), a prefix ending in "/" is a folder.
    # A variant touching none of them gets the stage its release built (kernels compiled once, profiles
    # parsed once). "" is every file: a kind that declares nothing shares nothing. The engine-image test
    # holds each list against what the real engine imports (tests/integration/test_engine_images.py).
    kernel_inputs: tuple[str, ...] = ("",)  # the aot builders, their kernel sources (native files always count)
    parser_inputs: tuple[str, ...] = ("",)  # the argument parser and every module it imports before it answers
    health_path: Optional[str] = None  # the server's health endpoint: the image's HEALTHCHECK
    # HEALTHCHECK failures do not count while a server loads its model and compiles (DSV4: minutes)
    health_start_period = 1800

    # the engine parser's argv grammar (engines/profiles.canonical_flags): flags a rule reads, so that
    # argparse's abbreviations of them count; short aliases; `--a_b` read as `--a-b`
    known_flags: tuple[str, ...] = ()
    flag_aliases: dict[str, str] = {}
    flag_underscores = False

    def flags(self, profile: LaunchProfile):
        """The profile's flags as this engine's parser reads them: the one parse every rule and
        renderer reads (parsed once per argv)."""
        return profile_flags(profile, self.known_flags, self.flag_aliases, self.flag_underscores)

    def listen_args(self, profile: LaunchProfile) -> list[str]:
        """Flags that make the server listen on all interfaces at its port, unless the profile sets them."""
        flags = self.flags(profile)
        port = profile.port or self.port
        out = []
        if "--host" not in flags and port is not None:
            out += ["--host", "0.0.0.0"]
        if "--port" not in flags and port is not None:
            out += ["--port", str(port)]
        return out

    def check_profile(self, name: str, profile: LaunchProfile) -> None:
        """The rules every engine has (engines/profiles.check_common); kinds add their own first.
        Raise ValueError naming the profile."""
        check_common(name, self.flags(profile))

    # name -> a known defect of some of this engine's releases (see Defect)
    defects: dict[str, Defect] = {}

    def check_defects(self, name: str, profile: LaunchProfile, version: str, fixed: frozenset) -> None:
        """Refuse a profile that meets a known defect of this engine version that no entry of the patch
        stack fixes (`fixed`: the defects the stack's entries name). Raise ValueError naming the profile."""

    def runtime_env(self) -> dict[str, str]:
        env = dict(self.env)
        if self.serve_time_jit:
            env.update({k: f"{CACHE_ROOT}/{v}" for k, v in {**JIT_CACHE_ENV, **self.cache_env}.items()})
        return env

    def resolved_cache_paths(self) -> dict[str, str]:
        """Where each cache must land, by the resolver that asks the installed package: name -> path."""
        if not self.serve_time_jit:
            return {}
        return {k: f"{CACHE_ROOT}/{v}" for k, v in sorted({**JIT_CACHE_PATHS, **self.cache_paths}.items())}

    def profile_port(self, profile: LaunchProfile) -> Optional[int]:
        flags = self.flags(profile)
        given = (flags.get("--port") or [None])[0]
        return int(given) if given and PORT.fullmatch(given) else (profile.port or self.port)


def check_dspark_block(name: str, block: Optional[int], proposals: int, what: str) -> None:
    if block is None:
        raise ValueError(f"profile {name!r}: DSpark needs dspark_block_size (the model's block size)")
    if proposals < block:
        raise ValueError(f"profile {name!r}: {what} is {proposals}, below the DSpark block size {block}")


GENERIC = EngineKind()  # a recipe with no engine: its profiles pass the rules every engine has
