"""vLLM: DSpark rules as vLLM spells them (--speculative-config JSON), serving defaults, smoke checks."""

from __future__ import annotations

import json
from pathlib import Path

from servebuild.engines.base import EngineKind, check_dspark_block


class VLLM(EngineKind):
    name = "vllm"
    port = 8000
    serve_time_jit = True  # Triton kernels, FlashInfer sampler JIT (on by default), DeepGEMM
    jit_probes = ("cext", "nvcc", "triton", "tilelang", "flashinfer")  # DSV4 mHC: TileLang; sampler: FlashInfer
    entrypoints = ("vllm.entrypoints.cli.main",)
    help_needs_gpu = True  # v0.26.0 `serve --help` fails with "Failed to infer device type" without a GPU
    # usage statistics off: a serving image phones nowhere (vLLM reads both; DO_NOT_TRACK is the common one)
    # TileLang 0.1.9 (the DSV4 mHC kernels) keeps every nvcc temp dir under /tmp/tvm-debug-mode-tempdirs
    # unless told to clean up (found by the smoke suite's writes-outside-/cache check)
    env = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "TILELANG_CLEANUP_TEMP_FILES": "1"}
    # vLLM's cache root: torch.compile artifacts, the FlashInfer autotune and JIT monitor records, downloads
    cache_env = {"VLLM_CACHE_ROOT": "vllm"}
    cache_paths = {"vllm": "vllm"}
    # the sampler's FlashInfer module (~100 s of the first start on an H200) and humming's host helpers
    aot_jits = {"flashinfer": "flashinfer.jit.", "humming": "humming."}
    argcheck = Path(__file__).with_name("argcheck.py")
    health_path = "/health"

    # vLLM's parser: `-sc` is --speculative-config, `--a_b` is `--a-b`
    known_flags = ("--speculative-config",)
    flag_aliases = {"-sc": "--speculative-config"}
    flag_underscores = True

    def check_profile(self, name, profile):
        """vLLM reads --speculative-config as JSON, as `-sc`, as `--speculative_config` (its parser
        turns underscores into dashes) and as dotted keys (`--speculative-config.method dspark`)
        merged over the JSON: the DSpark rule reads the merged object."""
        flags = self.flags(profile)
        given = flags.get("--speculative-config", [])
        if len(given) > 1:
            raise ValueError(f"profile {name!r}: --speculative-config is given {len(given)} times (in some spelling)")
        config: dict = {}
        if given:
            try:
                config = json.loads(given[0] or "")
            except json.JSONDecodeError as exc:
                raise ValueError(f"profile {name!r}: --speculative-config is not JSON ({exc.msg})") from None
            if not isinstance(config, dict):
                raise ValueError(f"profile {name!r}: --speculative-config must be a JSON object")
        for flag, values in flags.items():
            if flag.startswith("--speculative-config."):
                key = flag.split(".", 1)[1].replace("-", "_")
                if len(values) > 1 or key in config:
                    raise ValueError(f"profile {name!r}: speculative config key {key} is given twice")
                config[key] = _json_or_text(values[0])
        super().check_profile(name, profile)
        if str(config.get("method", "")).lower() == "dspark":
            k = config.get("num_speculative_tokens")
            if not isinstance(k, int) or isinstance(k, bool):
                raise ValueError(f"profile {name!r}: DSpark needs an integer num_speculative_tokens")
            check_dspark_block(name, profile.dspark_block_size, k, "num_speculative_tokens")


def _json_or_text(value):
    try:
        return json.loads(value) if value is not None else None
    except json.JSONDecodeError:
        return value


KIND = VLLM()
