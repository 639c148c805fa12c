"""8 release — a registry.

In: smoke-tested builds (their manifests and verdicts), a registry, credentials, a signing key.
Out: each platform pushed by digest, SBOM + build manifest + provenance (+ its DSSE signature)
attached as referrers, one OCI index under the tag, read back (publish.py); `verify` checks a
published tag end to end (verify.py). Nothing in the registry changes until every check has passed.
Reads: build/, plan/, lock/, the ground; oras-py and cryptography (optional, loaded when used).
"""
