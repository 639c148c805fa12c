"""3 lock — what the recipe leaves floating, pinned.

In: a LoadedRecipe (and, for `invoke lock`, the source cache, the registries, the local engine's ids).
Out: RECIPE.lock.yaml as a typed Lock (lockfile.py: read, checked, applied, written); compute.py makes
one by resolving PRs, base digests (basedigest.py) and hashing every diff as it applies; depsets.py
regenerates the hashed requirement sets from constraints/STACK/inputs.yaml (`invoke deps`).
Reads: sources/ (computing a lock prepares sources), recipe/ and the ground.
"""
