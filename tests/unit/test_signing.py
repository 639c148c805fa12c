"""DSSE signing of provenance statements (servebuild/release/signing.py).

Real keys made here with `cryptography` (and one pair with the OpenSSL CLI), real envelopes; the
keyid and the publishing guide's "checking a signature without servebuild" block are checked against OpenSSL,
an implementation independent of the one that signs. Every refused key file is one line that holds
none of the key's bytes (PEM lines, DER, the raw private value, in base64 or hex).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization as ser
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from servebuild.release import signing
from servebuild.release.signing import SigningError
from support import one_printable_line

REPO_ROOT = Path(__file__).resolve().parents[2]
STATEMENT = (
    json.dumps(
        {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "r.example/servebuild/toy", "digest": {"sha256": "ab" * 32}}],
        },
        indent=2,
        sort_keys=True,
    ).encode()
    + b"\n"
)
NOENC = ser.NoEncryption()


def new_key(kind: str):
    return {
        "ed25519": ed25519.Ed25519PrivateKey.generate,
        "p256": lambda: ec.generate_private_key(ec.SECP256R1()),
        "p384": lambda: ec.generate_private_key(ec.SECP384R1()),
        "rsa": lambda: rsa.generate_private_key(public_exponent=65537, key_size=1024),
    }[kind]()


def private_pem(key, fmt=ser.PrivateFormat.PKCS8, enc=NOENC) -> bytes:
    return key.private_bytes(ser.Encoding.PEM, fmt, enc)


def public_pem(key) -> bytes:
    return key.public_key().public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo)


def write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


def key_files(tmp_path: Path, kind: str, name: str = "sign"):
    key = new_key(kind)
    return (
        key,
        write(tmp_path / f"{name}.key", private_pem(key)),
        write(tmp_path / f"{name}.pub", public_pem(key), 0o644),
    )


def secrets_of(key) -> list[bytes]:
    """Every form in which a private key's bytes could leak into a message."""
    pem = private_pem(key)
    der = key.private_bytes(ser.Encoding.DER, ser.PrivateFormat.PKCS8, NOENC)
    if isinstance(key, ed25519.Ed25519PrivateKey):
        raw = key.private_bytes(ser.Encoding.Raw, ser.PrivateFormat.Raw, NOENC)
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        raw = key.private_numbers().private_value.to_bytes((key.curve.key_size + 7) // 8, "big")
    else:
        raw = key.private_numbers().d.to_bytes((key.key_size + 7) // 8, "big")
    lines = [line for line in pem.splitlines() if line and not line.startswith(b"-----")]
    return lines + [der, base64.b64encode(der)[:40], raw, base64.b64encode(raw)[:40], raw.hex().encode()]


def assert_one_line(exc: SigningError, *fragments: str, key=None) -> str:
    line = str(exc)
    assert "\n" not in line and line == exc.one_line(), line
    for fragment in fragments:
        assert fragment in line, line
    if key is not None:
        for secret in secrets_of(key):
            assert secret.decode("latin-1") not in line and repr(secret) not in line, line
    return line


# -- envelopes -------------------------------------------------------------------------------------------------


def test_pae_is_the_dsse_encoding():
    """The DSSE specification's own example (protocol.md), byte for byte."""
    assert (
        signing.pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    assert signing.pae("t", b"") == b"DSSEv1 1 t 0 "


@pytest.mark.parametrize("kind", ["ed25519", "p256"])
def test_sign_verify_round_trip(kind, tmp_path):
    key, key_file, pub_file = key_files(tmp_path, kind)
    signer = signing.load_private_key(key_file)
    data = signing.sign(STATEMENT, signer)
    doc = json.loads(data)
    assert set(doc) == {"payloadType", "payload", "signatures"}
    assert doc["payloadType"] == "application/vnd.in-toto+json"
    assert base64.b64decode(doc["payload"]) == STATEMENT  # the exact bytes, not a re-serialisation
    assert [s["keyid"] for s in doc["signatures"]] == [signer.keyid]
    # keyid: sha256 of the SubjectPublicKeyInfo DER, as OpenSSL writes it
    der = subprocess.run(
        ["openssl", "pkey", "-pubin", "-in", str(pub_file), "-outform", "DER"], capture_output=True, check=True
    ).stdout
    assert signer.keyid == "sha256:" + hashlib.sha256(der).hexdigest()
    envelope = signing.verify_envelope(data, pub_file.read_bytes())  # PEM bytes ...
    assert envelope.payload == STATEMENT and envelope.payload_type == signing.PAYLOAD_TYPE
    assert envelope.keyids == [signer.keyid]
    assert signing.verify_envelope(data, signing.load_public_key(pub_file)).payload == STATEMENT  # ... or a file


def test_ecdsa_sec1_key_and_url_safe_base64_are_accepted(tmp_path):
    key = new_key("p256")
    signer = signing.load_private_key(
        write(tmp_path / "ec.key", private_pem(key, ser.PrivateFormat.TraditionalOpenSSL))
    )
    doc = json.loads(signing.sign(STATEMENT, signer))
    doc["payload"] = base64.urlsafe_b64encode(STATEMENT).decode()  # DSSE allows either alphabet
    assert signing.verify_envelope(json.dumps(doc).encode(), signer.public).payload == STATEMENT


@pytest.mark.parametrize("kind", ["ed25519", "p256"])
def test_tampered_envelope_does_not_verify(kind, tmp_path):
    _, key_file, pub_file = key_files(tmp_path, kind)
    signer = signing.load_private_key(key_file)
    doc = json.loads(signing.sign(STATEMENT, signer))
    cases = {
        "payload": {**doc, "payload": base64.b64encode(STATEMENT.replace(b"ab", b"ac", 1)).decode()},
        "payload-type": {**doc, "payloadType": "application/json"},  # the type is signed too (PAE)
        "sig": {
            **doc,
            "signatures": [
                {
                    **doc["signatures"][0],
                    "sig": base64.b64encode(
                        bytes([base64.b64decode(doc["signatures"][0]["sig"])[0] ^ 1])
                        + base64.b64decode(doc["signatures"][0]["sig"])[1:]
                    ).decode(),
                }
            ],
        },
    }
    for name, tampered in cases.items():
        with pytest.raises(SigningError) as info:
            signing.verify_envelope(json.dumps(tampered).encode(), pub_file.read_bytes())
        assert_one_line(info.value, "the signature does not verify under", signer.keyid)


@pytest.mark.parametrize(
    "signer_kind,other_kind", [("ed25519", "ed25519"), ("p256", "p256"), ("ed25519", "p256"), ("p256", "ed25519")]
)
def test_wrong_key_does_not_verify(signer_kind, other_kind, tmp_path):
    _, key_file, _ = key_files(tmp_path, signer_kind, "a")
    _, _, other_pub = key_files(tmp_path, other_kind, "b")
    data = signing.sign(STATEMENT, signing.load_private_key(key_file))
    other = signing.load_public_key(other_pub)
    with pytest.raises(SigningError) as info:
        signing.verify_envelope(data, other)
    assert_one_line(info.value, f"the signature does not verify under {other.keyid}")


def test_a_keyid_is_a_hint_not_a_claim(tmp_path):
    """A signature by another key labelled with our keyid does not verify; a genuine one beside it does."""
    _, ours_file, ours_pub = key_files(tmp_path, "ed25519", "ours")
    _, theirs_file, _ = key_files(tmp_path, "p256", "theirs")
    ours, theirs = signing.load_private_key(ours_file), signing.load_private_key(theirs_file)
    forged = json.loads(signing.sign(STATEMENT, theirs))
    forged["signatures"][0]["keyid"] = ours.keyid
    with pytest.raises(SigningError, match="does not verify"):
        signing.verify_envelope(json.dumps(forged).encode(), ours_pub.read_bytes())
    genuine = json.loads(signing.sign(STATEMENT, ours))
    forged["signatures"].append(genuine["signatures"][0])
    assert signing.verify_envelope(json.dumps(forged).encode(), ours.public).payload == STATEMENT


@pytest.mark.parametrize(
    "data,fragment",
    [
        (b"not json", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"payload": "e30=", "signatures": [{"sig": "AA=="}]}', "no payloadType"),
        (b'{"payloadType": "t", "payload": "%%%", "signatures": [{"sig": "AA=="}]}', "payload is not base64"),
        (b'{"payloadType": "t", "payload": "e30=", "signatures": []}', "no signatures"),
        (b'{"payloadType": "t", "payload": "e30=", "signatures": ["x"]}', "signatures[0] is not an object"),
        (
            b'{"payloadType": "t", "payload": "e30=", "signatures": [{"keyid": "k"}]}',
            "signatures[0].sig is not a base64",
        ),
    ],
)
def test_malformed_envelope_is_one_line(data, fragment, tmp_path):
    _, _, pub = key_files(tmp_path, "ed25519")
    with pytest.raises(SigningError) as info:
        signing.verify_envelope(data, pub.read_bytes())
    assert_one_line(info.value, "is not a DSSE envelope", fragment)


# -- key files -----------------------------------------------------------------------------------------------


def _bad_private(tmp_path: Path, case: str, key):
    """(path to give as --sign-key, fragments of the one line) for one bad key file."""
    pem = private_pem(key)
    if case == "certificate":
        import trustme

        ca = trustme.CA()
        return write(tmp_path / "cert.pem", ca.cert_pem.bytes()), ["holds a certificate, not a PEM private key"]
    if case == "huge":  # a real key followed by 100 kB: refused by size, before any byte is read
        return write(tmp_path / "huge.pem", pem + b"A" * (100 << 10)), [
            "bytes; at most 65536 are read (64 KiB, a PEM private key)"
        ]
    if case == "directory":
        (tmp_path / "keys").mkdir()
        return tmp_path / "keys", ["is not a regular file"]
    if case == "fifo":  # opening a FIFO would block: it is refused by its type
        os.mkfifo(tmp_path / "fifo")
        return tmp_path / "fifo", ["is not a regular file"]
    if case == "missing":
        return tmp_path / "absent.pem", ["cannot read a PEM private key: no such file or directory"]
    if case == "world-readable":
        return write(tmp_path / "open.pem", pem, 0o644), ["readable by others (mode 644)", "chmod 600"]
    if case == "public-key":
        return write(tmp_path / "k.pub", public_pem(key)), ["holds a public key, not a PEM private key"]
    if case == "encrypted":
        enc = private_pem(key, enc=ser.BestAvailableEncryption(b"pass phrase"))
        return write(tmp_path / "enc.pem", enc), ["encrypted private key"]
    if case == "garbage-with-marker":
        broken = pem.replace(pem.splitlines()[1], pem.splitlines()[1][::-1])
        return write(tmp_path / "broken.pem", broken), ["is not a readable PEM private key"]
    if case == "rsa":
        return write(tmp_path / "rsa.pem", private_pem(new_key("rsa"))), [
            "is an RSA key (1024 bits)",
            "Ed25519 or ECDSA P-256",
        ]
    if case == "p384":
        return write(tmp_path / "p384.pem", private_pem(new_key("p384"))), ["is an ECDSA secp384r1 key"]
    if case == "key-material-as-path":  # `--sign-key "$(cat sign.key)"`: refused without echoing it
        return Path(pem.decode()), ["is not a file path", "never the key itself"]
    raise AssertionError(case)


PRIVATE_CASES = [
    "certificate",
    "huge",
    "directory",
    "fifo",
    "missing",
    "world-readable",
    "public-key",
    "encrypted",
    "garbage-with-marker",
    "rsa",
    "p384",
    "key-material-as-path",
]


@pytest.mark.parametrize("case", PRIVATE_CASES)
def test_bad_signing_key_file_is_one_line_without_key_bytes(case, tmp_path):
    key = new_key("ed25519")
    path, fragments = _bad_private(tmp_path, case, key)
    with pytest.raises(SigningError) as info:
        signing.load_private_key(path, "SERVEBUILD_SIGN_KEY")
    line = assert_one_line(info.value, "SERVEBUILD_SIGN_KEY", *fragments, key=key)
    if case != "key-material-as-path":
        assert line.startswith(f"{path}: SERVEBUILD_SIGN_KEY: "), line  # the place: file, then where it came from
    else:
        assert "PRIVATE KEY" not in line
    if case in ("rsa", "p384"):  # the other key types' bytes are not shown either
        other = serialization_key(path)
        for secret in secrets_of(other):
            assert secret.decode("latin-1") not in line


def serialization_key(path: Path):
    return ser.load_pem_private_key(path.read_bytes(), password=None)


@pytest.mark.parametrize(
    "case,fragments",
    [
        ("certificate", ["holds a certificate, not a PEM public key"]),
        ("private-key", ["holds a private key; give a PEM public key", "openssl pkey"]),
        ("directory", ["is not a regular file"]),
        ("rsa", ["is an RSA key (1024 bits)", "verifies Ed25519 or ECDSA P-256"]),
        ("empty", ["is not a PEM public key"]),
    ],
)
def test_bad_public_key_file_is_one_line(case, fragments, tmp_path):
    key = new_key("p256")
    if case == "certificate":
        import trustme

        path = write(tmp_path / "cert.pem", trustme.CA().cert_pem.bytes())
    elif case == "private-key":
        path = write(tmp_path / "sign.key", private_pem(key))
    elif case == "directory":
        path = tmp_path
    elif case == "rsa":
        path = write(tmp_path / "rsa.pub", public_pem(new_key("rsa")))
    else:
        path = write(tmp_path / "empty.pub", b"")
    with pytest.raises(SigningError) as info:
        signing.load_public_key(path)
    assert_one_line(info.value, f"{path}: --public-key: ", *fragments, key=key)


# -- a signing key is readable by its owner only ---------------------------------------------------------------


def write_key(tmp_path: Path, mode: int) -> Path:
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric import ed25519

    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(
        ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption()
    )
    path = tmp_path / "sign.key"
    path.write_bytes(pem)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o606, 0o620, 0o602, 0o610, 0o601, 0o644])
def test_a_signing_key_others_can_read_is_refused(tmp_path, mode):
    path = write_key(tmp_path, mode)
    with pytest.raises(SigningError) as info:
        signing.load_private_key(path)
    line = one_printable_line(info.value)
    assert f"readable by others (mode {mode:o})" in line and "chmod 600" in line, line


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_signing_key_only_its_owner_can_read_is_loaded(tmp_path, mode):
    assert signing.load_private_key(write_key(tmp_path, mode)).keyid


# -- the publishing guide's check with standard tools (docs/how-to/publish.md) ------------------------------------


def guide_check_block() -> list[str]:
    text = (REPO_ROOT / "docs" / "how-to" / "publish.md").read_text()
    blocks = [b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "DSSEv1" in b]
    assert len(blocks) == 1, "docs/how-to/publish.md: one ```sh block checks a DSSE envelope"
    return blocks[0].splitlines()


def run_guide_check(folder: Path, key_kind: str) -> subprocess.CompletedProcess:
    skip = "# ECDSA P-256" if key_kind == "ed25519" else "# Ed25519"
    script = "\n".join(line for line in guide_check_block() if not line.rstrip().endswith(skip))
    return subprocess.run(["sh", "-e", "-c", script], cwd=folder, capture_output=True, text=True)


@pytest.mark.parametrize("kind", ["ed25519", "p256"])
def test_the_guides_openssl_check_verifies_our_envelopes(kind, tmp_path):
    """The guide's block, run as written by sh with jq, base64 and OpenSSL: it accepts the envelope of the
    attached statement, refuses a tampered payload, and notices a payload that is not the statement."""
    if kind == "ed25519":  # this pair made by the OpenSSL CLI as the guide says; servebuild reads it
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(tmp_path / "sign.key")], check=True)
        (tmp_path / "sign.key").chmod(0o600)
        subprocess.run(
            ["openssl", "pkey", "-in", str(tmp_path / "sign.key"), "-pubout", "-out", str(tmp_path / "sign.pub")],
            check=True,
        )
        key_file = tmp_path / "sign.key"
    else:
        _, key_file, _ = key_files(tmp_path, kind)
    envelope = signing.sign(STATEMENT, signing.load_private_key(key_file))
    (tmp_path / "provenance.intoto.json").write_bytes(STATEMENT)
    (tmp_path / "envelope.json").write_bytes(envelope)
    ok = run_guide_check(tmp_path, kind)
    assert ok.returncode == 0, ok.stderr
    assert ("Signature Verified Successfully" if kind == "ed25519" else "Verified OK") in ok.stdout
    doc = json.loads(envelope)
    doc["payload"] = base64.b64encode(STATEMENT + b" ").decode()
    (tmp_path / "envelope.json").write_text(json.dumps(doc))
    bad = run_guide_check(tmp_path, kind)
    assert bad.returncode != 0 and "Verif" in bad.stdout + bad.stderr and "Verified OK" not in bad.stdout
    (tmp_path / "envelope.json").write_bytes(envelope)
    (tmp_path / "provenance.intoto.json").write_bytes(STATEMENT.replace(b"ab", b"cd"))
    differs = run_guide_check(tmp_path, kind)
    assert differs.returncode != 0 and "differ" in differs.stdout + differs.stderr


# -- verify's decision over the envelopes attached to one digest (servebuild/release/verify.py) ------------------------


def test_verify_decision_over_attached_envelopes(tmp_path):
    """A genuine envelope among strangers passes; otherwise the most telling problem is the one line."""
    from servebuild.release.verify import VerifyError, _check_signature

    _, ours_file, _ = key_files(tmp_path, "p256", "ours")
    _, theirs_file, _ = key_files(tmp_path, "ed25519", "theirs")
    ours, theirs = signing.load_private_key(ours_file), signing.load_private_key(theirs_file)
    digest = "sha256:" + "ab" * 32
    genuine = signing.sign(STATEMENT, ours)
    stranger = signing.sign(STATEMENT, theirs)
    other_statement = signing.sign(STATEMENT.replace(b"ab", b"cd", 1), ours)
    other_type = signing.sign(STATEMENT, ours, payload_type="application/json")

    def line(envelopes):
        with pytest.raises(VerifyError) as info:
            _check_signature(envelopes, "R linux/amd64", digest, STATEMENT, ours.public)
        assert "\n" not in str(info.value)
        return str(info.value)

    assert (
        _check_signature([stranger, b"junk", genuine], "R", digest, STATEMENT, ours.public)
        == f"signed by {ours.keyid}, verified"
    )
    assert (
        line([]) == f"R linux/amd64: no signed provenance attached to {digest} (want a DSSE envelope signed by "
        f"{ours.keyid})"
    )
    assert line([stranger]) == f"R linux/amd64: the provenance signature does not verify under {ours.keyid}"
    assert line([b"junk"]) == "R linux/amd64: the signature artifact is not a DSSE envelope: not JSON"
    assert line([b"junk", stranger, other_statement]).startswith(
        "R linux/amd64: the signed payload is not the attached statement (signed sha256:"
    )
    assert line([other_statement, other_type]) == (
        "R linux/amd64: the signed payload type is 'application/json', not application/vnd.in-toto+json"
    )
