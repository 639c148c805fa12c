"""`invoke doctor`: is this host ready to build (and, with --serve, to run) servebuild's images?

Each check is one line: `ok`, `warn` (the host can build but not serve, or is short of something) or
`FAIL` (a build would stop). Real probes, not guesses: the engine answers, a BuildKit build with a
`--secret` runs through the client servebuild uses (a `FROM scratch` image, nothing pulled, nothing
tagged), the engine lists its runtimes, the driver says its version, the engine's disk says what is free.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from servebuild.build.docker import DockerClient
from servebuild.errors import ServebuildError

MIN_DRIVER = 580  # CUDA 13.0 needs an R580 driver or newer
PROBE_SECONDS = 10  # each engine probe (ping, API version, info): an engine that accepts and never answers fails
FREE_GB = 40  # an engine image is ~10 GB, its build cache as much again (docs/reference/host.md: Prerequisites)


@dataclass
class Check:
    name: str
    status: str  # ok | warn | FAIL
    detail: str

    def line(self) -> str:
        return f"{self.status:4} {self.name}: {self.detail}"


DRIVER_VERSION = re.compile(r"\d{1,6}(?:\.\d{1,6}){1,3}")  # 580.95.05; never a 5,000-digit "version"
PROC_VERSION = Path("/proc/driver/nvidia/version")


def read_driver() -> tuple[Optional[str], Optional[str]]:
    """(the NVIDIA driver's version from nvidia-smi or the kernel module, None without one; what an
    nvidia-smi that answered (exit 0) printed instead of a version, escaped and cut, else None)."""
    smi, printed = shutil.which("nvidia-smi"), None
    if smi:
        try:
            proc = subprocess.run(
                [smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            proc = None  # a hung or broken nvidia-smi: the kernel module still says its version
        text = proc.stdout[:4096].decode(errors="replace") if proc is not None else ""
        words = text.split()
        if proc is not None and proc.returncode == 0 and words and DRIVER_VERSION.fullmatch(words[0]):
            return words[0], None
        if proc is not None and proc.returncode == 0:  # it answered, with what is not a version
            first = (text.strip().splitlines() or [""])[0].strip()
            quoted = ascii(first)  # binary bytes escaped, never written to the terminal
            printed = (
                "nothing"
                if not first
                else quoted
                if len(quoted) <= 42
                else f"{quoted[:40]}... ({len(first)} characters)"
            )
    try:
        text = PROC_VERSION.read_bytes()[:65536].decode(errors="replace")
    except OSError:
        return None, printed
    found = re.search(r"Kernel Module\s+([0-9.]+)", text) or re.search(r"\b(\d{3}\.\d+(?:\.\d+)?)\b", text)
    return (found.group(1), None) if found and DRIVER_VERSION.fullmatch(found.group(1)) else (None, printed)


def driver_version() -> Optional[str]:
    """The NVIDIA driver's version, from nvidia-smi or the kernel module; None without a driver (or where
    neither prints a version: binary bytes, a number no driver has)."""
    return read_driver()[0]


def driver_check(version: Optional[str], gpu_fail: str, printed: Optional[str] = None) -> Check:
    if version is None and printed is not None:  # a driver's tool that answers nonsense: broken, not absent
        return Check(
            "driver",
            "FAIL",
            f"nvidia-smi printed {printed}, not a driver version, and the kernel "
            f"module names none: the NVIDIA driver install is broken; reinstall it",
        )
    if version is None:
        return Check(
            "driver",
            gpu_fail,
            f"no NVIDIA driver found (nvidia-smi, /proc/driver/nvidia); serving "
            f"CUDA 13.0 images needs driver >= {MIN_DRIVER}",
        )
    major = int(version.split(".")[0])
    return Check(
        "driver",
        "ok" if major >= MIN_DRIVER else "FAIL",
        f"NVIDIA driver {version}"
        + ("" if major >= MIN_DRIVER else f": CUDA 13.0 needs >= {MIN_DRIVER}; upgrade the driver"),
    )


def driver_probe(gpu_fail: str) -> Check:
    """The driver line of `doctor`."""
    version, printed = read_driver()
    return driver_check(version, gpu_fail, printed)


def buildkit_secret_build(docker: DockerClient) -> Check:
    with tempfile.TemporaryDirectory(prefix="servebuild-doctor-") as tmp:
        context = Path(tmp)
        (context / "Dockerfile").write_text("FROM scratch\nCOPY probe /probe\n")
        (context / "probe").write_text("servebuild doctor\n")
        secret = context / "secret"
        secret.write_text("not a secret\n")
        secret.chmod(0o600)
        try:
            proc = subprocess.run(
                [docker.client, "build", "--progress=plain", "--secret", f"id=probe,src={secret}", "-q", str(context)],
                env=docker._env(),
                capture_output=True,
                text=True,
                timeout=300,
            )
        except subprocess.TimeoutExpired:
            return Check(
                "BuildKit",
                "FAIL",
                f"a BuildKit build of an empty image did not finish in 300 s through {docker.client}",
            )
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            return Check(
                "BuildKit", "FAIL", f"a BuildKit build with --secret failed through {docker.client}: {tail[:200]}"
            )
        image = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        if image.startswith("sha256:"):
            docker.remove_image(image)
    return Check("BuildKit", "ok", f"a BuildKit build with --secret runs through {docker.client}")


def run_checks(serve: bool = False, disk_path: Optional[Path] = None) -> list[Check]:
    gpu_fail = "FAIL" if serve else "warn"
    checks = [Check("host", "ok", f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores")]
    try:
        docker = DockerClient(timeout=PROBE_SECONDS)
        info = docker.info()
    except ServebuildError as exc:
        return checks + [Check("docker", "FAIL", f"{exc}; install docker.io (Debian/Ubuntu) and start dockerd")]
    checks.append(
        Check(
            "docker",
            "ok",
            f"client {docker.client}, engine {info.get('ServerVersion', '?')} "
            f"({info.get('OSType', '?')}/{info.get('Architecture', '?')})",
        )
    )
    checks.append(buildkit_secret_build(docker))
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    if "nvidia" in runtimes:
        checks.append(Check("nvidia runtime", "ok", f"the engine lists runtimes {', '.join(runtimes)}"))
    else:
        checks.append(
            Check(
                "nvidia runtime",
                gpu_fail,
                "the engine has no `nvidia` runtime: images build here but "
                "`docker run --gpus` cannot; install nvidia-container-toolkit and run "
                "`nvidia-ctk runtime configure --runtime=docker`",
            )
        )
    checks.append(driver_probe(gpu_fail))
    root = Path(info.get("DockerRootDir") or "/var/lib/docker")
    where = disk_path or root
    try:
        free = shutil.disk_usage(where).free / 1e9
    except OSError:  # a remote engine (DOCKER_HOST), or a root this user cannot read
        return checks + [
            Check(
                "disk",
                "warn",
                f"cannot read the free space of the engine's {where} from here; "
                f"an engine image build wants {FREE_GB} GB there",
            )
        ]
    checks.append(
        Check(
            "disk",
            "ok" if free >= FREE_GB else "warn",
            f"{free:.0f} GB free at {where}"
            + ("" if free >= FREE_GB else f"; an engine image build wants {FREE_GB} GB"),
        )
    )
    return checks
