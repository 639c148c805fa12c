"""servebuild: reproducible container images for LLM inference servers on NVIDIA Hopper."""

from pathlib import Path

__version__ = "0.1.0"

PACKAGE_DIR = Path(__file__).resolve().parent  # manifests name files under it as servebuild/...
PROJECT_DIR = PACKAGE_DIR.parent  # the checkout: tests/image (the smoke suite) and recipes/
TOOLS_DIR = PACKAGE_DIR / "tools"  # scripts that run inside images, never imported here
