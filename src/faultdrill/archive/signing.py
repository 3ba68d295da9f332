"""Ed25519 signatures over a bundle's manifest: who vouches for the bundle, not only that
it is whole.

Hashes alone prove integrity against the manifest, and nothing about origin: whoever can
rebuild the archive can rebuild a matching manifest (edit ``report.json``, update its
hash). A signed bundle carries ``manifest.sig`` beside ``manifest.json``::

    {"format": "faultdrill-signature/1", "algorithm": "ed25519",
     "key_id": "<16 hex>", "signature": "<base64 of the 64-byte signature>"}

The signature covers the exact bytes of ``manifest.json``, which lists the sha256 of every
other member, so one signature vouches for the whole bundle. ``key_id`` is the first 16 hex
digits of the sha256 of the raw 32-byte public key (:func:`key_id`); the signer's key id
is also written into the manifest and into the bundled responsibility dossier
(``baseline/dossier.json``: ``responsibility.bundle_signature``).

Keys are PEM files made by ``faultdrill keygen --out NAME``: ``NAME`` (PKCS#8 private key,
mode 0600) and ``NAME.pub`` (SubjectPublicKeyInfo). A private key readable by anyone else
is refused, as ssh refuses one.

Built on the ``cryptography`` package (OpenSSL's Ed25519: constant-time, maintained, and
already a dependency of the Kubernetes client here), imported only by the commands that
sign or check; the probe and the drill never import this module.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultdrill import boundedjson
from faultdrill.errors import RunDirError
from faultdrill.safepath import UnsafePathError, open_named

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = [
    "ALGORITHM",
    "SIGNATURE",
    "SIG_FORMAT",
    "SigningKeyError",
    "check_signature",
    "key_id",
    "keygen",
    "load_private_key",
    "load_public_key",
    "read_signature",
    "sign_manifest",
]

SIGNATURE = "manifest.sig"
SIG_FORMAT = "faultdrill-signature/1"
ALGORITHM = "ed25519"
_KEY_FILE_LIMIT = 1 << 16
_KEY_ID = re.compile(r"[0-9a-f]{16}")


class SigningKeyError(RunDirError):
    """A key file is missing, unreadable, not Ed25519, or too widely readable."""


def _raw(public: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public: Ed25519PublicKey) -> str:
    """First 16 hex digits of the sha256 of the raw public key."""
    return hashlib.sha256(_raw(public)).hexdigest()[:16]


def _create_new(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # exactly this mode, whatever the umask
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def keygen(out: Path) -> tuple[Path, Path, str]:
    """Make a new key pair: ``out`` (private, mode 0600) and ``out.pub``. Never overwrites
    (SigningKeyError when either exists). Returns (private path, public path, key id)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    pub_path = out.with_name(out.name + ".pub")
    for p in (out, pub_path):
        if os.path.lexists(p):
            raise SigningKeyError(f"{p} exists; refusing to overwrite a key (choose another --out)")
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:
        _create_new(out, private, 0o600)
        try:
            _create_new(pub_path, public, 0o644)
        except OSError:
            out.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise SigningKeyError(
            f"{exc.filename or out}: cannot write the key: {exc.strerror}"
        ) from exc
    return out, pub_path, key_id(key.public_key())


def _read_key_file(path: Path, *, private: bool) -> bytes:
    """The bytes of a key file: a regular file (a FIFO or device is refused without
    blocking: :func:`faultdrill.safepath.open_named`) of at most 64 KiB."""
    try:
        f = open_named(path, limit=_KEY_FILE_LIMIT)
    except UnsafePathError as exc:
        raise SigningKeyError(
            f"{path} is not a key file (a regular file of a few hundred bytes): {exc}"
        ) from exc
    except OSError as exc:
        raise SigningKeyError(f"{path}: cannot read the key: {exc.strerror}") from exc
    with f:
        st = os.fstat(f.fileno())
        if private and st.st_mode & 0o077:
            raise SigningKeyError(
                f"{path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}): a signing "
                f"key must be private; run `chmod 600 {path}`"
            )
        return f.read(_KEY_FILE_LIMIT + 1)


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key of a PEM file (``faultdrill keygen``). SigningKeyError otherwise."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = _read_key_file(path, private=True)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise SigningKeyError(
            f"{path}: not an unencrypted PEM private key ({exc}); make one with "
            "`faultdrill keygen --out NAME`"
        ) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"{path}: a {type(key).__name__}, not an Ed25519 key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """The Ed25519 public key of a PEM file (``NAME.pub`` of ``faultdrill keygen``)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    data = _read_key_file(path, private=False)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        hint = " (that is a private key: give NAME.pub)" if b"PRIVATE" in data else ""
        raise SigningKeyError(f"{path}: not a PEM public key{hint}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"{path}: a {type(key).__name__}, not an Ed25519 key")
    return key


def sign_manifest(manifest: bytes, key: Ed25519PrivateKey) -> bytes:
    """The ``manifest.sig`` member for these exact manifest bytes."""
    sig = {
        "format": SIG_FORMAT,
        "algorithm": ALGORITHM,
        "key_id": key_id(key.public_key()),
        "signature": base64.b64encode(key.sign(manifest)).decode(),
    }
    return (json.dumps(sig, indent=2) + "\n").encode()


def read_signature(raw: bytes) -> dict[str, Any] | str:
    """The parsed ``manifest.sig``, or why it is not a well-formed one: JSON (nested at
    most a few levels), the known format and algorithm, a ``key_id`` of 16 hex digits and
    a ``signature`` in strict base64 of exactly 64 bytes. A malformed signature is a
    failure whether or not a key is given to check it against."""
    try:
        sig = boundedjson.loads(raw, max_depth=4)
    except ValueError as exc:
        return f"{SIGNATURE} is not JSON ({exc})"
    if not isinstance(sig, dict) or sig.get("format") != SIG_FORMAT:
        return f"{SIGNATURE} is not a {SIG_FORMAT} signature"
    if sig.get("algorithm") != ALGORITHM:
        return f"{SIGNATURE}: algorithm {sig.get('algorithm')!r}, only {ALGORITHM} is known"
    kid = sig.get("key_id")
    if not isinstance(kid, str) or not _KEY_ID.fullmatch(kid):
        return f"{SIGNATURE}: key_id {str(kid)[:40]!r} is not 16 hex digits"
    if _signature_bytes(sig.get("signature")) is None:
        return (
            f"{SIGNATURE}: 'signature' is not the base64 of a 64-byte Ed25519 signature "
            "(truncated or damaged)"
        )
    return sig


def _signature_bytes(value: Any) -> bytes | None:
    """The 64 signature bytes of a strict base64 string, else None."""
    if not isinstance(value, str) or len(value) != 88:
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 64 else None


def check_signature(manifest: bytes, raw_sig: bytes, public: Ed25519PublicKey) -> str | None:
    """Why ``raw_sig`` is not a valid signature of ``manifest`` by ``public`` (None: it is)."""
    from cryptography.exceptions import InvalidSignature

    sig = read_signature(raw_sig)
    if isinstance(sig, str):
        return sig
    want = key_id(public)
    if sig.get("key_id") != want:
        return f"signed by key {sig.get('key_id')!r}, not by the given key {want}"
    try:
        public.verify(_signature_bytes(sig.get("signature")) or b"", manifest)
    except (InvalidSignature, ValueError):
        return (
            f"the signature does not match the manifest: the manifest was changed after key "
            f"{want} signed it (or the signature was forged)"
        )
    return None
