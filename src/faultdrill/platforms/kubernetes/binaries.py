"""Where the test cluster's binaries come from: a verified cache, else a build from source.

The control plane is Kubernetes v1.20.2 (kube-apiserver, kube-controller-manager,
kube-scheduler) built from Debian 12's ``kubernetes`` source package, plus etcd from
Debian's ``etcd-server`` (``/usr/bin/etcd``). Debian 12 ships no apiserver package, so the
three Kubernetes binaries come as one tarball, ``kubernetes-1.20.2-linux-amd64-bin.tgz``
(``./kube-apiserver ./kube-controller-manager ./kube-scheduler``) with its sha256 in a
``.sha256`` file beside it (``sha256sum`` format).

Search order (:func:`tarball_candidates`), first verified tarball wins:

1. ``$FAULTDRILL_K8S_CACHE`` (a directory holding the tarball, or the tarball itself);
2. ``shared/cache/<tarball>`` in the repository's parent directories (the project's shared
   cache, ``../shared/cache`` of a checkout);
3. ``~/.cache/faultdrill/k8s/<tarball>``.

A tarball whose ``.sha256`` is missing or does not match is skipped (and said). A verified
tarball is unpacked once into ``<store>/bin-<sha256[:12]>/``, where ``<store>`` is
``$FAULTDRILL_K8S_CACHE`` if it names a directory, else ``~/.cache/faultdrill/k8s``; every
binary is then checked by ``--version``.

With none found, :func:`ensure_binaries` (``build=True``) runs
``scripts/build-k8s-binaries.sh <store>`` (apt-get golang-1.19-go + rsync, deb-src through a
private apt configuration, the reflect2 patch, ``make WHAT=...``: 6-7 min of two cores) and
then unpacks what it stored. ``python -m faultdrill.platforms.kubernetes.binaries
[--build]`` does the same from a shell and prints the directory.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from faultdrill.errors import EnvironmentPrepError

__all__ = [
    "BINARIES",
    "ENV_CACHE",
    "TARBALL",
    "VERSION",
    "K8sBinaries",
    "build_script",
    "ensure_binaries",
    "find_binaries",
    "store_dir",
    "tarball_candidates",
]

VERSION = "1.20.2"
TARBALL = f"kubernetes-{VERSION}-linux-amd64-bin.tgz"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
ENV_CACHE = "FAULTDRILL_K8S_CACHE"
ETCD = Path("/usr/bin/etcd")
_REPO = Path(__file__).resolve().parents[4]  # src/faultdrill/platforms/kubernetes/<this>


@dataclass(frozen=True)
class K8sBinaries:
    """Absolute paths of the four control-plane executables."""

    etcd: Path
    apiserver: Path
    controller_manager: Path
    scheduler: Path
    source: str  # where the Kubernetes binaries came from (tarball path)


def store_dir() -> Path:
    """Where unpacked binaries (and built tarballs) are kept."""
    env = os.environ.get(ENV_CACHE, "")
    if env and not env.endswith(".tgz"):
        return Path(env).expanduser()
    return Path.home() / ".cache" / "faultdrill" / "k8s"


def tarball_candidates() -> list[Path]:
    """Every place a tarball is looked for, in order (existing or not)."""
    out: list[Path] = []
    env = os.environ.get(ENV_CACHE, "")
    if env:
        p = Path(env).expanduser()
        out.append(p if env.endswith(".tgz") else p / TARBALL)
    out += [d / "shared" / "cache" / TARBALL for d in _REPO.parents]
    out.append(Path.home() / ".cache" / "faultdrill" / "k8s" / TARBALL)
    return list(dict.fromkeys(out))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(tarball: Path) -> str | None:
    """Why the tarball cannot be used (None: its ``.sha256`` names it and matches)."""
    sums = tarball.with_name(tarball.name + ".sha256")
    try:
        expected = sums.read_text().split()[0].lower()
    except (OSError, IndexError):
        return f"{sums} is missing or empty"
    got = _sha256(tarball)
    if got != expected:
        return f"sha256 {got} does not match {expected} in {sums}"
    return None


def _version_ok(binary: Path) -> str | None:
    try:
        done = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{binary} --version failed: {exc}"
    if f"v{VERSION}" not in done.stdout + done.stderr:
        return f"{binary} --version says {(done.stdout + done.stderr).strip()!r}, not v{VERSION}"
    return None


def _unpack(tarball: Path, digest: str) -> Path:
    """Unpack once into ``<store>/bin-<digest12>``; returns that directory."""
    dest = store_dir() / f"bin-{digest[:12]}"
    if all((dest / b).is_file() for b in BINARIES):
        return dest
    tmp = dest.with_name(dest.name + f".part{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if Path(m.name).name in BINARIES and m.isfile()]
        for m in members:
            m.name = Path(m.name).name  # flat, whatever prefix the archive used
            tar.extract(m, tmp, filter="data")
    missing = [b for b in BINARIES if not (tmp / b).is_file()]
    if missing:
        shutil.rmtree(tmp, ignore_errors=True)
        raise EnvironmentPrepError(f"{tarball} lacks {', '.join(missing)}")
    for b in BINARIES:
        (tmp / b).chmod(0o755)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def find_binaries(log: Callable[[str], None] = lambda _m: None) -> K8sBinaries:
    """The binaries from the first verified tarball. Raises EnvironmentPrepError naming
    every place looked at and the fix when there is none, or when etcd is missing."""
    if not ETCD.is_file():
        raise EnvironmentPrepError(
            f"{ETCD} not found: apt-get install -y --no-install-recommends etcd-server"
        )
    skipped: list[str] = []
    for tarball in tarball_candidates():
        if not tarball.is_file():
            continue
        why = verify(tarball)
        if why:
            skipped.append(f"{tarball}: {why}")
            log(f"skipping {tarball}: {why}")
            continue
        bindir = _unpack(tarball, _sha256(tarball))
        bad = [w for w in (_version_ok(bindir / b) for b in BINARIES) if w]
        if bad:
            skipped.append(f"{tarball}: {'; '.join(bad)}")
            continue
        log(f"using {tarball} (unpacked in {bindir})")
        return K8sBinaries(
            etcd=ETCD,
            apiserver=bindir / "kube-apiserver",
            controller_manager=bindir / "kube-controller-manager",
            scheduler=bindir / "kube-scheduler",
            source=str(tarball),
        )
    looked = ", ".join(str(p) for p in tarball_candidates())
    raise EnvironmentPrepError(
        f"no Kubernetes v{VERSION} binaries: looked for a verified {TARBALL} in {looked}"
        + (f" (skipped: {'; '.join(skipped)})" if skipped else "")
        + f"; build them with `python -m faultdrill.platforms.kubernetes.binaries --build` "
        f"(6-7 min, root) or set {ENV_CACHE} to a directory holding the tarball"
    )


def build_script() -> Path:
    return _REPO / "scripts" / "build-k8s-binaries.sh"


def ensure_binaries(*, build: bool, log: Callable[[str], None] = print) -> K8sBinaries:
    """:func:`find_binaries`, else (``build``) build from Debian's source into the store
    and use that. Raises EnvironmentPrepError when neither works."""
    try:
        return find_binaries(log)
    except EnvironmentPrepError:
        if not build or not ETCD.is_file():
            raise
    script = build_script()
    if not script.is_file():
        raise EnvironmentPrepError(
            f"no cached binaries and no build script at {script} (a source checkout has it)"
        )
    out = store_dir()
    log(f"building Kubernetes v{VERSION} from Debian's source into {out} (6-7 min)")
    try:
        done = subprocess.run(["bash", str(script), str(out)], check=False, timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentPrepError(f"{script} failed: {exc}") from exc
    if done.returncode != 0:
        raise EnvironmentPrepError(f"{script} {out} failed (exit {done.returncode}); see above")
    return find_binaries(log)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m faultdrill.platforms.kubernetes.binaries")
    ap.add_argument("--build", action="store_true", help="build from source when not cached")
    args = ap.parse_args(argv)
    try:
        found = ensure_binaries(build=args.build, log=lambda m: print(m, file=sys.stderr))
    except EnvironmentPrepError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(found.apiserver.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
