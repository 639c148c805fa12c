"""bench: servebuild-bench (tools/servebuild_bench.py, the same file the images carry) run on this host,
then its pictures (matplotlib is here, not in the images)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from servebuild import TOOLS_DIR
from servebuild.check import plots
from servebuild.errors import InputError, ServebuildError

OPTIONS = (
    "url",
    "serve",
    "model",
    "api",
    "ignore_eos",
    "sizes",
    "runs",
    "max_tokens",
    "requests",
    "grid_sizes",
    "concurrencies",
    "warmup",
    "ks",
    "health_timeout",
    "request_timeout",
    "calibrate",
)


def bench(root: Path, suite: str = "decode", out=None, **options) -> int:
    """The bench's exit status: 0, or 2 after its own one line (partial results kept and marked)."""
    out_dir = (
        Path(out) if out else root / "build" / "bench" / f"{suite.replace(',', '+')}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    argv = [sys.executable, str(TOOLS_DIR / "servebuild_bench.py"), "--suite", suite, "--out", str(out_dir)]
    for name in OPTIONS:
        value = options.get(name)
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    try:
        code = subprocess.run(argv).returncode
    except OSError as exc:
        raise InputError(f"cannot run {argv[1]}: {exc.strerror}", field="bench") from None
    if (out_dir / "bench.json").exists():
        try:
            for picture in plots.bench_plots(out_dir):
                print(f"plot: {picture}")
        except ServebuildError:
            if code == 0:  # the pictures' own line is the one line
                raise
            # the bench already said its one line (a full --out says it too): the pictures are extra
    return code
