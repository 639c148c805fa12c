"""SGLang: DSpark rules as SGLang spells them, serving defaults, smoke checks."""

from __future__ import annotations

from ...launch import flag_values
from ..base import EngineKind, check_dspark_block


class SGLang(EngineKind):
    name = "sglang"
    port = 30000
    serve_time_jit = True  # DSV4 kernels via tvm-ffi, TileLang mHC prewarm, Triton, FlashInfer
    jit_probes = ("cext", "nvcc", "triton", "tvm-ffi", "tilelang")
    entrypoints = ("sglang.launch_server",)

    def check_profile(self, name, profile):
        flags = flag_values(profile.args + profile.extra_args)
        algo = flags.get("--speculative-algorithm")
        if algo and (algo[0] or "").upper() == "DSPARK":
            draft = flags.get("--speculative-num-draft-tokens")
            if not draft or draft[0] is None or not draft[0].isdigit():
                raise ValueError(f"profile {name!r}: DSPARK needs an integer --speculative-num-draft-tokens")
            # SGLang counts the verified token: N draft tokens are N-1 proposals
            check_dspark_block(name, profile.dspark_block_size, int(draft[0]) - 1,
                               "--speculative-num-draft-tokens minus one")


KIND = SGLang()
