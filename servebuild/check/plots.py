"""Pictures of measurements, where people would rather look than read (matplotlib, no display):

- ttft.png: the TTFT of every measured request of each bisect row (all its runs), one box each, every
  request drawn as a point over it, on a log axis when the spread is wide (a live compile is a dot far right);
- decode.png: each row's single-stream decode rate, 1/TPOT (median of its runs, the range as an error bar);
- ksweep.png: single-stream 1/TPOT (and accept length, where measured) against the DSpark k of a
  `servebuild-bench --suite ksweep`.
"""

from __future__ import annotations

import io
import json
import os
import random
from pathlib import Path
from typing import Optional

from servebuild.errors import InputError
from servebuild.fsutil import atomic_write, refuse_link, writing


def _pyplot():
    """matplotlib, imported when a picture is drawn: importing it writes a font cache under $HOME, which
    no other command (verify, build) may do."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a build host
    import matplotlib.pyplot as plt

    return plt


DECODE_METRICS = ("decode_tg_tps", "story_tg_tps", "tail_decode_tps")  # the first a row has is its bar


def _save(fig, path: Path) -> Path:
    """The picture drawn in memory, then written whole by atomic_write: a link planted at `path` (in --out,
    in build/) is refused in one line, never followed as savefig would."""
    try:
        refuse_link(path, "the picture")
        data = io.BytesIO()
        fig.savefig(data, format="png", dpi=110, bbox_inches="tight")
        with writing(path, "the picture"):
            atomic_write(path, data.getvalue())
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}", field="plots") from None
    finally:
        _pyplot().close(fig)
    return path


def read_samples(path: Path) -> list[dict]:
    """The measured requests of a bench's samples.jsonl (warm-up and calibration requests are not in it)."""
    out = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("ok") and isinstance(value.get("ttft_s"), (int, float)):
            out.append(value)
    return out


def ttft_plot(series: dict[str, list[float]], path: Path, title: str) -> Optional[Path]:
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    labels = list(series)
    fig, ax = _pyplot().subplots(figsize=(9, 1.2 + 0.7 * len(labels)))
    ax.boxplot([series[k] for k in labels], vert=False, showfliers=False, widths=0.6)
    rng = random.Random(0)  # the same jitter every time: the same data give the same picture
    for i, label in enumerate(labels, start=1):
        ax.scatter(series[label], [i + rng.uniform(-0.18, 0.18) for _ in series[label]], s=9, alpha=0.55)
    ax.set_yticks(range(1, len(labels) + 1), labels)
    ax.invert_yaxis()  # the first row on top, as in the table
    values = [v for vs in series.values() for v in vs if v > 0]
    if values and max(values) / max(min(values), 1e-9) > 20:
        ax.set_xscale("log")
        # 1, 2 and 5 of each decade labelled as plain numbers (the default labels only 0.1 and 1)
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("time to first token (s)")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def decode_plot(bars: dict[str, tuple[float, float, float]], metric: str, path: Path) -> Optional[Path]:
    if not bars:
        return None
    labels = list(bars)
    medians = [bars[k][0] for k in labels]
    below = [bars[k][0] - bars[k][1] for k in labels]
    above = [bars[k][2] - bars[k][0] for k in labels]
    fig, ax = _pyplot().subplots(figsize=(max(5.0, 1.3 * len(labels) + 2), 4.2))
    ax.bar(range(len(labels)), medians, yerr=[below, above], capsize=5, color="#4c72b0")
    for i, value in enumerate(medians):
        ax.annotate(f"{value:.1f}", (i, value), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right")
    ax.set_ylabel(f"{metric}: single-stream 1/TPOT (tok/s; median of runs, bar: range)")
    ax.set_title("decode rate per variant")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def bisect_plots(data: dict, out_dir: Path) -> list[Path]:
    """ttft.png and decode.png for a bisect report, from the rows' copied bench samples and metrics."""
    series: dict[str, list[float]] = {}
    bars: dict[str, tuple[float, float, float]] = {}
    metric = None
    for row in data.get("rows", []):
        label = row["variant"] + (f" / {row['profile']}" if row.get("profile") else "")
        for run in row.get("runs", []):
            if run.get("artifacts"):
                series.setdefault(label, []).extend(
                    s["ttft_s"] for s in read_samples(out_dir / run["artifacts"] / "samples.jsonl")
                )
        metric = metric or next((m for m in DECODE_METRICS if isinstance(row["metrics"].get(m), (int, float))), None)
        if metric and isinstance(row["metrics"].get(metric), (int, float)):
            lo, hi = row.get("spread", {}).get(metric, [row["metrics"][metric]] * 2)
            bars[label] = (row["metrics"][metric], lo, hi)
    made = [
        ttft_plot(series, out_dir / "ttft.png", "TTFT per variant (every measured request of every run)"),
        decode_plot(bars, metric or "", out_dir / "decode.png"),
    ]
    return [p for p in made if p is not None]


def ksweep_plot(summary: dict, path: Path) -> Optional[Path]:
    ks = sorted(
        int(k.split("_")[1][1:])
        for k in summary
        if k.startswith("ksweep_k") and k.endswith("_tg_tps") and isinstance(summary[k], (int, float))
    )
    if not ks:
        return None
    fig, ax = _pyplot().subplots(figsize=(6.5, 4.2))
    lines = ax.plot(
        ks, [summary[f"ksweep_k{k}_tg_tps"] for k in ks], marker="o", label="single-stream 1/TPOT (tok/s, median)"
    )
    ax.set_xlabel("k: speculative draft tokens (DSpark k)")
    ax.set_ylabel("single-stream 1/TPOT (tok/s, median of runs)")
    ax.set_xticks(ks)
    ax.grid(alpha=0.3)
    accepted = [(k, summary.get(f"ksweep_k{k}_accept_length")) for k in ks]
    accepted = [(k, v) for k, v in accepted if isinstance(v, (int, float))]
    if accepted:
        twin = ax.twinx()
        lines += twin.plot(
            [k for k, _ in accepted],
            [v for _, v in accepted],
            marker="s",
            color="#dd8452",
            label="accept length (right axis)",
        )
        twin.set_ylabel("accept length")
    # above the axes, not in them: in the upper left it hid the k=1 point, usually the highest
    ax.legend(
        lines,
        [line.get_label() for line in lines],
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        ncol=len(lines),
        frameon=False,
    )
    ax.set_title("speculative k sweep: single-stream 1/TPOT" + (" and accept length" if accepted else ""), pad=24)
    return _save(fig, path)


def bench_plots(out_dir: Path) -> list[Path]:
    """ttft.png for a bench run's samples (one box per suite case) and ksweep.png for a k sweep."""
    samples = read_samples(out_dir / "samples.jsonl")
    series: dict[str, list[float]] = {}
    for s in samples:
        label = s.get("suite") if s.get("case") == s.get("suite") else f"{s.get('suite')} {s.get('case')}"
        series.setdefault(str(label), []).append(s["ttft_s"])
    made = [ttft_plot(series, out_dir / "ttft.png", f"TTFT per case ({os.path.basename(out_dir)})")]
    try:
        summary = json.loads((out_dir / "bench.json").read_text())
    except (OSError, ValueError):
        summary = {}
    if isinstance(summary, dict) and str(summary.get("suite")) == "ksweep":
        made.append(ksweep_plot(summary, out_dir / "ksweep.png"))
    return [p for p in made if p is not None]
