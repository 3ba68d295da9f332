"""Certificates, token and kubeconfig of the test cluster, made with openssl (about 2 s).

Files in ``pki_dir`` (``../shared/notes/kubernetes.md`` section 4): ``ca.key``/``ca.crt``; the
apiserver's ``apiserver.key``/``apiserver.crt`` signed by it for ``IP:<address>``,
``IP:127.0.0.1``, ``DNS:localhost`` (serverAuth); the service-account key pair
``sa.key``/``sa.pub``; ``tokens.csv`` (one admin token in ``system:masters``); and one
``kubeconfig`` (server ``https://<address>:<port>``, the CA, the token) for the controller
manager, the scheduler, the kubelets and the harness. Private keys are mode 0600 and are
removed with the run's other secrets at tear-down.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from faultdrill.errors import EnvironmentPrepError

__all__ = ["Pki", "make_pki"]


@dataclass(frozen=True)
class Pki:
    dir: Path
    server: str  # https://address:port
    token: str

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    def path(self, name: str) -> Path:
        return self.dir / name


def _openssl(args: list[str], cwd: Path) -> None:
    try:
        done = subprocess.run(
            ["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentPrepError(f"openssl {args[0]}: {exc} (apt-get install openssl)") from exc
    if done.returncode != 0:
        raise EnvironmentPrepError(f"openssl {' '.join(args)} failed: {done.stderr.strip()}")


def make_pki(pki_dir: Path, address: str, port: int) -> Pki:
    """Create every file (see the module docstring). Raises EnvironmentPrepError."""
    pki_dir.mkdir(parents=True, exist_ok=True)
    pki_dir.chmod(0o700)
    ext = pki_dir / "apiserver.ext"
    ext.write_text(
        f"subjectAltName=IP:{address},IP:127.0.0.1,DNS:localhost,DNS:kubernetes\n"
        "extendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n"
    )
    ca = ["-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt"]
    csr = ["-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out", "apiserver.csr"]
    sign = ["-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial"]
    steps = [
        ["req", *ca, "-days", "2", "-subj", "/CN=faultdrill-test-ca"],
        ["req", *csr, "-subj", "/CN=kube-apiserver"],
        ["x509", "-req", *sign, "-out", "apiserver.crt", "-days", "2", "-extfile", ext.name],
        ["genrsa", "-out", "sa.key", "2048"],
        ["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"],
    ]
    for args in steps:
        _openssl(args, pki_dir)
    token = secrets.token_hex(16)
    (pki_dir / "tokens.csv").write_text(f"{token},admin,admin,system:masters\n")
    server = f"https://{address}:{port}"
    (pki_dir / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters:\n- name: faultdrill\n  cluster:\n"
        f"    server: {server}\n    certificate-authority: {pki_dir / 'ca.crt'}\n"
        "users:\n- name: admin\n  user:\n"
        f"    token: {token}\n"
        "contexts:\n- name: faultdrill\n  context: {cluster: faultdrill, user: admin}\n"
        "current-context: faultdrill\n"
    )
    for name in ("ca.key", "apiserver.key", "sa.key", "tokens.csv", "kubeconfig"):
        (pki_dir / name).chmod(0o600)
    return Pki(pki_dir, server, token)
