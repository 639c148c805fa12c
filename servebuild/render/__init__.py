"""5 render — the build context.

In: a recipe, platform, base references, the inputs manifest and the source tarball.
Out: a context directory: the Dockerfile rendered from images/ at the top of the checkout (Dockerfile.j2 composes
stages/build, engine, runtime and the install mode's own fragment from modes/), the requirement sets,
launchers and the profile-check files (launchers.py), the serve-time JIT toolchain (toolchain.py),
with content-derived mtimes so BuildKit's cache follows content. Every value is prepared in Python;
templates only compose and loop.
Reads: recipe/, modes/, engines/, sources/ (the tarball's fixed mtime), the ground.
"""
