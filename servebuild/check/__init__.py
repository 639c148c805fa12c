"""7 check — proving images and hosts.

In: an image (or a host), what its recipe expects, and optionally a command to run in it.
Out: a smoke verdict (smoke.py runs tests/image with testinfra; JUnit XML beside the build), launch
profiles parsed by the engine's own parser (profiles.py), A/B tables and a bisected culprit
(bisect.py), and the host report of `invoke doctor` (host.py).
Reads: build/, plan/, render/ (the profile-check files), recipe/, engines/, the ground.
"""
