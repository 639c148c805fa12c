"""Time and peak memory of refusing hostile YAML recipes (alias bomb, deep nesting, many keys).

Each case loads in a fresh child process (`load_recipe`), so its peak RSS is its own. Prints a
table; nothing is asserted (these machines are noisy). Usage: python scripts/bench_hostile_yaml.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def alias_bomb() -> str:
    rows = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(8):
        prev, cur = chr(97 + i), chr(98 + i)
        rows.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 10) + "]")
    return "\n".join(rows) + "\n"


def map_bomb() -> str:
    rows = ["a: &a {x: 1, y: 2}"]
    for i in range(20):
        prev, cur = chr(97 + i), chr(98 + i)
        rows.append(f"{cur}: &{cur} {{k1: *{prev}, k2: *{prev}, k3: *{prev}}}")
    return "\n".join(rows) + "\n"


CASES = {
    "alias bomb (10^9 list items)": alias_bomb,
    "mapping bomb (3^20 maps)": map_bomb,
    "text bomb (100 KB x 5000 aliases)": lambda: (
        'description: &s "' + "x" * 100_000 + '"\nargs: [' + ", ".join(["*s"] * 5000) + "]\n"
    ),
    "deep nesting (5000 [)": lambda: "a: " + "[" * 5000 + "\n",
    "deep nesting (5000 {)": lambda: "a: " + "{a: " * 5000 + "\n",
    "100k keys (just under 1 MiB)": lambda: "".join(f"k{i}: 1\n" for i in range(100_000)),
    "2 MiB file (over the limit)": lambda: "description: " + "x" * (2 << 20) + "\n",
}

CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from servebuild.errors import ServebuildError
from servebuild.recipe.load import load_recipe
start = time.perf_counter()
try:
    load_recipe("hostile", __import__("pathlib").Path(sys.argv[2]))
    outcome = "loaded"
except ServebuildError as exc:
    outcome = str(exc)
print(json.dumps({"seconds": time.perf_counter() - start, "outcome": outcome,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> int:
    print(f"{'case':32} {'seconds':>8} {'peak MiB':>9}  outcome")
    for name, make in CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "recipes").mkdir()
            (Path(tmp) / "recipes" / "hostile.yaml").write_text(make())
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, str(ROOT), tmp], capture_output=True, text=True, timeout=120
            )
            if proc.returncode != 0:
                print(f"{name:32} crashed: {proc.stderr.strip().splitlines()[-1:]}")
                continue
            row = json.loads(proc.stdout)
            print(f"{name:32} {row['seconds']:8.3f} {row['peak_mib']:9.1f}  {row['outcome'][:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
