"""4 plan — options + recipe + lock + site config -> a frozen BuildPlan.

In: the project root, a recipe name and BuildOptions (what the command line and environment say).
Out: a BuildPlan (make.py) that does not change once made: the recipe with its lock applied and its
variant chosen (validated once), platform, tag, bases (mirrored, digest-pinned), secrets, build dir.
Everything that can be checked without an engine or the network is checked here.
Reads: lock/, sources/ (the cache location), recipe/, the ground; config.py (git and image mirrors),
resources.py (MAX_JOBS / NVCC_THREADS).
"""
