"""The whole test suite in two pytest runs, concurrent when the disk allows (issue 30: CI inside 45
minutes, every tier real).

    .venv/bin/python scripts/run_tests.py [PYTEST ARGS...]

The two engine-image tests (SGLang and vLLM, about half of CI's time, `-m engine_image`), the arm64
digest check (the torch pair for linux/arm64 under QEMU against its committed id, also `engine_image`) and the tests
that build a multi-GB image on an engine of their own (`-m disk_heavy`: the torch pair on two engines)
run on a second dockerd this script starts (its own data root, exec root, socket and bridge, no iptables
rules: tests/integration/test_farm.py's SecondEngine; RUN steps use the host network), one after the
other; everything else runs on the machine's engine. Each run has its own engine, build cache, image
store, prune and temp directory, so neither sees the other's images or has its cache pruned under it.

The two runs go at the same time when the disk has room for what both at once used (AT_ONCE_GB, measured), else one
after the other (slower, under CI's limit), and the script says which and why before it starts:
a full disk fails a build far from its cause (CI's run of 2026-12-06 ran out at 1,860 s).
SERVEBUILD_TEST_ORDER=concurrent or sequential overrides the choice.

The engine images' run is written to build/tests/engine-images.log (its summary is printed at the end);
the other run streams here. Then the ten slowest tests, each tier's total over both runs, and the disk:
the free space at start, the least seen and when (samples in build/tests/disk.json). Exit status: the
first run that failed (pytest's own code; 5, no tests collected, is a failure too), else 0.

`python -m pytest` still runs everything, one test at a time, on one engine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

from integration.test_farm import SecondEngine  # noqa: E402

OUT = ROOT / "build" / "tests"
NODE2 = "engine_image or disk_heavy"
# the peak disk use of each run alone (GB), measured by this script's own samples in a fresh clone run one
# after the other (2026-12-06, 54.6 GB free at start): the rest 17.3 GB; the engine images 40.3 GB at the
# end of the SGLang test, of which 18 GB were two derived test recipes building the venv again unpinned
# (fixed: support.copy_recipe_chain), now about 20 GB each; the torch pair after them about 24 GB (its
# second engine's --no-cache build beside the engine images' download caches). docs/how-to/run-the-tests.md
NEED_GB = {"engine-images": 25.0, "rest": 18.0}
# the two runs' peaks do not come at the same time: what both at once used at most (free at start less
# the least free seen), measured: 33.3 GB on CI's machine (2026-12-06: 51.9 GB free at start,
# least 18.6), 34.0, 33.4 and 33.3 GB here (2026-12-07: 78.0 -> 44.0, 77.5 -> 44.1, 55.1 -> 21.8). The sum
# of the two peaks with the margin (51 GB) was the rule before: CI's machine starts with about that much
# free, and its landing of 2026-12-07 took 3,423 s (57 minutes, what one after the other takes) where the
# landing before took 2,283 s.
AT_ONCE_GB = 34.0
MARGIN_GB = 8.0


class DiskWatch:
    """The free space on each filesystem the runs write to, sampled every few seconds: the least seen
    and when, the free space at start, and the samples (what two concurrent runs used at once is AT_ONCE_GB's
    measure, and a full disk fails builds far from its cause)."""

    def __init__(self, paths: list[Path], every: float = 5.0):
        self.paths = {os.stat(p).st_dev: p for p in paths if p.exists()}
        self.least: dict[int, tuple[int, float]] = {}
        self.first: dict[int, int] = {}
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.start = time.monotonic()
        self.every = every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        at = time.monotonic() - self.start
        row = {}
        for dev, path in self.paths.items():
            try:
                free = shutil.disk_usage(path).free
            except OSError:
                continue
            self.first.setdefault(dev, free)
            row[str(path)] = round(free / 1e9, 2)
            if dev not in self.least or free < self.least[dev][0]:
                self.least[dev] = (free, at)
        self.samples.append((round(at, 1), row))

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            self.sample()

    def free_gb(self) -> float:
        """The least free space now over the watched filesystems."""
        self.sample()
        return min(self.samples[-1][1].values(), default=float("inf"))

    def report(self) -> str:
        return "; ".join(
            f"{self.paths[d]}'s filesystem {self.first[d] / 1e9:.1f} GB free at start, least {free / 1e9:.1f} GB "
            f"at {at:.0f} s (peak use {(self.first[d] - free) / 1e9:.1f} GB)"
            for d, (free, at) in sorted(self.least.items())
        )

    def write(self, path: Path) -> None:
        path.write_text(json.dumps({"every_s": self.every, "samples": self.samples}) + "\n")


def choose_order(free_gb: float) -> tuple[str, str]:
    """(concurrent|sequential, why): both runs at once only when the disk holds what both at once used
    (AT_ONCE_GB, measured; never less than either run's own peak) and a margin."""
    both = max(AT_ONCE_GB, *NEED_GB.values()) + MARGIN_GB
    forced = os.environ.get("SERVEBUILD_TEST_ORDER", "")
    if forced in ("concurrent", "sequential"):
        return forced, f"SERVEBUILD_TEST_ORDER={forced}"
    if free_gb >= both:
        return "concurrent", f"{free_gb:.1f} GB free holds what both runs at once used ({both:.0f} GB with the margin)"
    one = max(NEED_GB.values()) + MARGIN_GB
    short = f"; WARNING: even one run at a time needs about {one:.0f} GB: a build may fail on a full disk"
    if free_gb >= one:
        short = ""
    return "sequential", (
        f"{free_gb:.1f} GB free is less than what both runs at once used ({both:.0f} GB with the margin): "
        f"one after the other (each needs up to about {one:.0f} GB), slower{short}"
    )


def pytest(name: str, args: list[str], env: dict, log=None) -> subprocess.Popen:
    times = OUT / f"{name}.times.json"
    times.unlink(missing_ok=True)
    # outside the checkout: messages name paths under the working directory relative to it, and the
    # tests compare them with their tmp_path as given
    basetemp = Path(tempfile.gettempdir()) / f"servebuild-tests-{name}"
    cmd = [sys.executable, "-m", "pytest", f"--basetemp={basetemp}", "-p", "no:cacheprovider", *args]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env={**env, "SERVEBUILD_TEST_TIMES": str(times)},
        stdout=log,
        stderr=subprocess.STDOUT if log else None,
    )


def summary(names: list[str]) -> None:
    per_test: dict[str, float] = {}
    for name in names:
        path = OUT / f"{name}.times.json"
        if path.exists():
            per_test.update(json.loads(path.read_text()))
    if not per_test:
        print("run_tests: no test times were written (did either run start?)")
        return
    tiers: dict[str, list[float]] = {}
    for nodeid, seconds in per_test.items():
        parts = nodeid.split("/")
        tiers.setdefault(parts[1] if len(parts) > 2 and parts[0] == "tests" else "other", []).append(seconds)
    print("\n==== where the time went (both runs) ====\nten slowest tests (s):")
    for nodeid, seconds in sorted(per_test.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {seconds:8.1f}  {nodeid}")
    print("tiers (tests, s):")
    for tier, times in sorted(tiers.items()):
        print(f"  {tier:12s} {len(times):5d} {sum(times):9.1f}")


def docker_root() -> Path:
    out = subprocess.run(["docker", "info", "--format", "{{.DockerRootDir}}"], capture_output=True, text=True)
    return Path(out.stdout.strip() or "/var/lib/docker")


def main(extra: list[str]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    node = SecondEngine()
    print(f"run_tests: starting a second dockerd for the engine-image tests ({node.dir})", flush=True)
    node.start()
    watch = DiskWatch([docker_root(), node.dir, Path(tempfile.gettempdir()), ROOT])
    order, why = choose_order(watch.free_gb())
    print(f"run_tests: disk at start: {watch.report()}", flush=True)
    print(f"run_tests: the two runs {'at once' if order == 'concurrent' else 'one after the other'}: {why}", flush=True)
    watch.thread.start()
    engine_log = OUT / "engine-images.log"
    codes: dict[str, int] = {}
    try:
        base = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
        with engine_log.open("w") as log:

            def node2_run() -> subprocess.Popen:
                proc = pytest(
                    "engine-images",
                    ["-m", NODE2, *extra],
                    {**base, "DOCKER_HOST": f"unix://{node.sock}", "SERVEBUILD_TEST_BUILD_NETWORK": "host"},
                    log,
                )
                print(f"run_tests: engine-image tests on node 2 (pid {proc.pid}, log {engine_log})", flush=True)
                return proc

            images = node2_run() if order == "concurrent" else None
            rest = pytest("rest", ["-m", f"not ({NODE2})", *extra], base)
            codes["rest"] = rest.wait()
            print(f"\nrun_tests: the rest exited {codes['rest']} after {time.monotonic() - start:.0f} s", flush=True)
            if images is None:
                images = node2_run()
            codes["engine-images"] = images.wait()
    finally:
        watch.stop.set()
        node.stop()
        subprocess.run(["rm", "-rf", str(node.dir)], capture_output=True)
        watch.write(OUT / "disk.json")
    tail = engine_log.read_text(errors="replace").splitlines()
    cut = next(
        (i for i, line in enumerate(tail) if "short test summary" in line or "recipes checked" in line),
        max(0, len(tail) - 60),
    )
    print(f"\n==== engine-image tests (node 2; whole log: {engine_log}) ====")
    print("\n".join(tail[cut:]))
    summary(["rest", "engine-images"])
    print(f"run_tests: disk: {watch.report()} (samples: {OUT / 'disk.json'})")
    print(
        f"run_tests: {order}; {', '.join(f'{k} exit {v}' for k, v in codes.items())}; "
        f"wall {time.monotonic() - start:.0f} s"
    )
    failed = [code for code in (codes.get("rest", 1), codes.get("engine-images", 1)) if code != 0]
    return failed[0] if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
