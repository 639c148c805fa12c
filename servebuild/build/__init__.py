"""6 build — one image on a BuildKit engine, tagged only after its manifest.

In: a BuildPlan and an engine (DockerClient: the local socket, TCP+TLS or ssh).
Out: a BuildResult (run.py): bases resolved -> sources fetched -> context rendered -> BuildKit build
-> manifest written (manifest.py) -> tag. A failure leaves no tag. farm.py picks which engine builds
which platform and builds several at once; bases.py makes Debian base images without a registry.
Reads: render/, plan/, lock/, sources/, recipe/, the ground.
"""
