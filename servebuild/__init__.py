"""servebuild: reproducible container images for LLM inference servers on NVIDIA Hopper."""

__version__ = "0.1.0"
