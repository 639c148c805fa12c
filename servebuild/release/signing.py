"""Signed provenance: DSSE envelopes (https://github.com/secure-systems-lab/dsse) over the exact bytes
of the in-toto statement that publish attaches.

Envelope: {"payloadType": "application/vnd.in-toto+json", "payload": base64(statement bytes),
"signatures": [{"keyid": "sha256:<hex of the public key's SubjectPublicKeyInfo DER>", "sig": base64}]};
the signature is over PAE = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body. Keys: Ed25519 or
ECDSA P-256 (SHA-256, DER signature), PEM files only. A private key file is checked like the other
secret files (a path, never the key itself; a regular file of a few kB, mode 600, a PEM marker) and
its bytes never appear in any message.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

from servebuild.errors import InputError, IntegrityError
from servebuild.fsutil import read_input_stat, sha256_bytes

PAYLOAD_TYPE = "application/vnd.in-toto+json"
ENVELOPE_TYPE = "application/vnd.dsse.envelope.v1+json"
MAX_ENVELOPE = 16 << 20
PRIVATE_MARKER = b"PRIVATE KEY-----"
PUBLIC_MARKER = b"-----BEGIN PUBLIC KEY-----"
CERT_MARKER = b"-----BEGIN CERTIFICATE-----"
KINDS = "Ed25519 or ECDSA P-256"


class SigningError(InputError):
    """A signing key or an envelope is unusable, or a signature does not verify (no key bytes shown)."""


class BadSignature(IntegrityError, SigningError):
    """A well-formed envelope none of whose signatures verifies under the key."""


@dataclass(frozen=True)
class PublicKey:
    key: object = field(repr=False)  # Ed25519PublicKey or EllipticCurvePublicKey (P-256)
    keyid: str

    def verify(self, sig: bytes, data: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        try:
            if isinstance(self.key, ec.EllipticCurvePublicKey):
                self.key.verify(sig, data, ec.ECDSA(hashes.SHA256()))
            else:
                self.key.verify(sig, data)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class PrivateKey:
    key: object = field(repr=False)  # Ed25519PrivateKey or EllipticCurvePrivateKey (P-256)
    public: PublicKey
    source: str = ""  # where it came from, for progress lines ("--sign-key FILE")

    @property
    def keyid(self) -> str:
        return self.public.keyid

    def sign(self, data: bytes) -> bytes:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        if isinstance(self.key, ec.EllipticCurvePrivateKey):
            return self.key.sign(data, ec.ECDSA(hashes.SHA256()))
        return self.key.sign(data)


@dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    signatures: tuple[tuple[str, bytes], ...]  # (keyid, sig)

    @property
    def keyids(self) -> list[str]:
        return [k for k, _ in self.signatures]


# -- keys ----------------------------------------------------------------------------------------------


def keyid_of(public_key) -> str:
    from cryptography.hazmat.primitives import serialization

    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + sha256_bytes(der)


def _kind(key) -> str:
    """A key's type in words, without any of its bytes."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)):
        return f"an ECDSA {key.curve.name} key"
    if isinstance(key, (rsa.RSAPrivateKey, rsa.RSAPublicKey)):
        return f"an RSA key ({key.key_size} bits)"
    return f"a {type(key).__name__.lstrip('_')} key"


def _supported(key) -> bool:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    if isinstance(key, (ed25519.Ed25519PrivateKey, ed25519.Ed25519PublicKey)):
        return True
    return isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)) and isinstance(
        key.curve, ec.SECP256R1
    )


def _read_pem(path: Path, field: str, what: str) -> tuple[bytes, int]:
    """The bytes and mode of a key file given by path: a path (not key material), a regular file of a
    few kB. Messages name the path, never the content."""
    text = str(path)
    if not text or len(text) > 4096 or "\x00" in text or "\n" in text or "-----" in text:
        raise SigningError(f"is not a file path; give the path of {what}, never the key itself", field=field)
    kind = "private-key" if "private" in what else "public-key"
    data, st = read_input_stat(path, kind, text, field=field, error=SigningError)
    return data, st.st_mode


def load_private_key(path: Path, field: str = "--sign-key") -> PrivateKey:
    """An unencrypted PEM private key (PKCS#8, or SEC1 for ECDSA), Ed25519 or ECDSA P-256."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    what = "a PEM private key"
    data, mode = _read_pem(path, field, what)
    place = {"file": str(path), "field": field}
    if PRIVATE_MARKER not in data:
        held = "a certificate" if CERT_MARKER in data else "a public key" if b"PUBLIC KEY-----" in data else None
        raise SigningError(f"holds {held}, not {what}" if held else f"is not {what}", **place)
    if mode & 0o077:
        raise SigningError(f"is readable by others (mode {mode & 0o777:o}); chmod 600 it", **place)
    if b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in data or b"Proc-Type: 4,ENCRYPTED" in data:
        raise SigningError(
            "is an encrypted private key; servebuild reads unencrypted keys only (keep the file mode 600)", **place
        )
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):  # their text is ours to replace: it never holds the key
        raise SigningError(f"is not a readable PEM private key ({KINDS})", **place) from None
    finally:
        del data
    if not _supported(key):
        raise SigningError(f"is {_kind(key)}; servebuild signs with {KINDS}", **place)
    public = key.public_key()
    return PrivateKey(key, PublicKey(public, keyid_of(public)), f"{field} {path}")


def public_key_from_pem(data: bytes, where: str = "public key", field: str = "--public-key") -> PublicKey:
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    what = "a PEM public key"
    place = {"file": where, "field": field}
    if PRIVATE_MARKER in data:
        raise SigningError(f"holds a private key; give {what} (`openssl pkey -in KEY -pubout`)", **place)
    if PUBLIC_MARKER not in data:
        raise SigningError(f"holds a certificate, not {what}" if CERT_MARKER in data else f"is not {what}", **place)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise SigningError(f"is not a readable PEM public key ({KINDS})", **place) from None
    if not _supported(key):
        raise SigningError(f"is {_kind(key)}; servebuild verifies {KINDS}", **place)
    return PublicKey(key, keyid_of(key))


def load_public_key(path: Path, field: str = "--public-key") -> PublicKey:
    return public_key_from_pem(_read_pem(path, field, "a PEM public key")[0], str(path), field)


# -- envelopes -----------------------------------------------------------------------------------------


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE pre-authentication encoding: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def sign(payload: bytes, key: PrivateKey, payload_type: str = PAYLOAD_TYPE) -> bytes:
    """The DSSE envelope (JSON bytes) of `payload`, exactly as given, signed by `key`."""
    sig = key.sign(pae(payload_type, payload))
    envelope = {
        "payloadType": payload_type,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": key.keyid, "sig": base64.b64encode(sig).decode()}],
    }
    return json.dumps(envelope, indent=2, sort_keys=True).encode() + b"\n"


def _b64(value, what: str) -> bytes:
    if not isinstance(value, str):
        raise SigningError(f"is not a DSSE envelope: {what} is not a base64 string")
    try:  # DSSE allows standard or URL-safe base64
        return base64.b64decode(value.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise SigningError(f"is not a DSSE envelope: {what} is not base64") from None


def parse_envelope(data: bytes) -> Envelope:
    if len(data) > MAX_ENVELOPE:
        raise SigningError(f"is not a DSSE envelope: larger than {MAX_ENVELOPE} bytes")
    try:
        doc = json.loads(data)
    except ValueError:
        raise SigningError("is not a DSSE envelope: not JSON") from None
    if not isinstance(doc, dict):
        raise SigningError("is not a DSSE envelope: not a JSON object")
    if not isinstance(doc.get("payloadType"), str) or not doc["payloadType"]:
        raise SigningError("is not a DSSE envelope: no payloadType")
    payload = _b64(doc.get("payload"), "payload")
    signatures = doc.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise SigningError("is not a DSSE envelope: no signatures")
    out = []
    for i, s in enumerate(signatures):
        if not isinstance(s, dict):
            raise SigningError(f"is not a DSSE envelope: signatures[{i}] is not an object")
        keyid = s.get("keyid", "")
        out.append((keyid if isinstance(keyid, str) else "", _b64(s.get("sig"), f"signatures[{i}].sig")))
    return Envelope(doc["payloadType"], payload, tuple(out))


def verify_envelope(data: bytes, public_key: Union[PublicKey, bytes]) -> Envelope:
    """The envelope, if one of its signatures verifies under `public_key` (a PublicKey or PEM bytes);
    else SigningError. Every signature is tried: a keyid is a hint, not a claim."""
    key = public_key if isinstance(public_key, PublicKey) else public_key_from_pem(public_key)
    envelope = parse_envelope(data)
    message = pae(envelope.payload_type, envelope.payload)
    if not any(key.verify(sig, message) for _, sig in envelope.signatures):
        raise BadSignature(f"the signature does not verify under {key.keyid}")
    return envelope
