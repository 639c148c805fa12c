"""2 sources — the engine's patched source tarball.

In: a LoadedRecipe, a platform and the source cache ($SERVEBUILD_CACHE).
Out: a PreparedSource (prepare.py): the pinned tree (a git commit from a bare mirror, or a hash-pinned
release wheel/sdist from PyPI), the patch stack applied in order with each diff's sha256, and a
byte-stable tarball. PR entries resolve to commits from the mirror alone (prs.py; no GitHub API).
Reads: recipe/ and the ground.
"""
