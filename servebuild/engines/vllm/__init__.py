"""vLLM: DSpark rules as vLLM spells them (--speculative-config JSON), serving defaults, smoke checks."""

from __future__ import annotations

import json

from ...launch import flag_values
from ..base import EngineKind, check_dspark_block


class VLLM(EngineKind):
    name = "vllm"
    port = 8000
    serve_time_jit = True  # Triton kernels, FlashInfer sampler JIT (on by default), DeepGEMM
    jit_probes = ("cext", "nvcc", "triton", "tilelang")  # the DSV4 mHC kernels are TileLang JIT
    entrypoints = ("vllm.entrypoints.cli.main",)
    help_needs_gpu = True  # v0.26.0 `serve --help` fails with "Failed to infer device type" without a GPU
    env = {"VLLM_CACHE_ROOT": "/cache/vllm"}

    def check_profile(self, name, profile):
        flags = flag_values(profile.args + profile.extra_args)
        spec = flags.get("--speculative-config")
        if not spec:
            return
        try:
            config = json.loads(spec[0] or "")
        except json.JSONDecodeError as exc:
            raise ValueError(f"profile {name!r}: --speculative-config is not JSON ({exc.msg})") from None
        if not isinstance(config, dict):
            raise ValueError(f"profile {name!r}: --speculative-config must be a JSON object")
        if str(config.get("method", "")).lower() == "dspark":
            k = config.get("num_speculative_tokens")
            if not isinstance(k, int) or isinstance(k, bool):
                raise ValueError(f"profile {name!r}: DSpark needs an integer num_speculative_tokens")
            check_dspark_block(name, profile.dspark_block_size, k, "num_speculative_tokens")


KIND = VLLM()
