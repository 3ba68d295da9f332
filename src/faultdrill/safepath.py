"""Files of a run directory handled as untrusted input: no symlink followed, nothing outside.

A run directory (or an unpacked bundle) may have been copied, edited or received from
someone else, and faultdrill often runs as root. Two rules, one place:

* :func:`escape` says why a recorded path is NOT strictly inside a directory with no
  symbolic link on the way (``faultdrill cleanup`` asks it before any undo acts on a path
  a ledger names);
* :func:`write_file` / :func:`replacing` write a file without ever writing through a
  symbolic link: every directory below the base is opened with ``O_NOFOLLOW`` (created
  when missing), the data goes to a new temporary file (``O_EXCL``) in the target's
  directory, which is then renamed over the target (a rename replaces a link, never
  follows it). A symbolic link (or anything but a regular file) at the target's name is
  refused, naming it: someone put it there. :func:`read_bytes` reads the same way.

``within`` is the run directory (followed if it is itself a link: the user named it);
``within=None`` means a path the user named on the command line (``--junit``, ``--out``):
its parent directory is taken as given, only its final name must not be a link.

Checks are made when the file is opened, by descriptor: nobody can swap a directory for a
link between the check and the write. What :func:`escape` says of a path is true when it
is said (an undo acting on the path afterwards works by path).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO

from faultdrill.errors import RunDirError

__all__ = [
    "UnsafePathError",
    "escape",
    "open_file",
    "open_named",
    "read_bytes",
    "read_named",
    "replacing",
    "write_file",
]

#: Non-blocking so that opening a FIFO (or a device) someone put in its place returns at
#: once instead of waiting for a writer; the type is then checked by descriptor.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePathError(RunDirError):
    """A file of a run directory is a symbolic link, lies outside it, or is not a regular
    file: nothing was read or written."""


def _lexical_parts(base: Path, path: Path) -> list[str] | str:
    """The components of ``path`` below ``base`` (both compared as written), or why not."""
    text = str(path)
    if not path.is_absolute():
        return f"{text} is not an absolute path"
    if "\0" in text:
        return f"{text!r} holds a NUL byte"
    raw = PurePosixPath(text).parts
    if any(p in (".", "..") for p in text.split("/")):
        return f"{text} climbs with '..' (or holds '.')"
    base_parts = PurePosixPath(str(base)).parts
    if tuple(raw[: len(base_parts)]) != base_parts:
        return f"{text} is outside {base}"
    return list(raw[len(base_parts) :])


def _kind_in(parent: int, name: str) -> str | None:
    """'link', 'dir', 'other' or None (absent) for ``name`` in the open directory
    ``parent``: from the directory's listing, so a mount point there is never stat'ed
    (stat'ing a FUSE mount whose server is stopped blocks)."""
    with os.scandir(parent) as entries:
        for entry in entries:
            if entry.name == name:
                if entry.is_symlink():
                    return "link"
                return "dir" if entry.is_dir(follow_symlinks=False) else "other"
    return None


def escape(base: Path, path: Path | str, *, allow_base: bool = False) -> str | None:
    """Why ``path`` is not strictly inside ``base`` with no symbolic link on the way (None
    when it is). ``base`` is compared as given (pass it resolved); ``path`` must be
    absolute, without ``.``/``..``; every component of it below ``base`` that exists
    must not be a link (those that do not exist, or a ``base`` that does not, hold nothing
    to act on).
    ``allow_base``: ``base`` itself is acceptable too."""
    path = Path(path)
    parts = _lexical_parts(base, path)
    if isinstance(parts, str):
        return parts
    if not parts and not allow_base:
        return f"{path} is {base} itself, not a path inside it"
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None  # nothing there: nothing to act on
    except OSError as exc:
        return f"{base}: {exc.strerror}"
    try:
        for i, part in enumerate(parts):
            kind = _kind_in(fd, part)
            if kind == "link":
                where = Path(base, *parts[: i + 1])
                return f"{where} is a symbolic link (to {_target(where)})"
            if kind is None or i == len(parts) - 1:
                return None
            if kind != "dir":
                return f"{Path(base, *parts[: i + 1])} is not a directory"
            nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return None
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    finally:
        os.close(fd)


def _target(link: Path) -> str:
    try:
        return os.readlink(link)
    except OSError:
        return "?"


def _open_parent(path: Path, within: Path | None, create: bool) -> tuple[int, str]:
    """(descriptor of the directory that holds ``path``, its final name), every directory
    below ``within`` opened without following a link (and made when ``create``). Both are
    made absolute first (``..`` taken lexically: a path that climbs out is outside)."""
    path = Path(os.path.abspath(path))
    if within is None:
        parent, name = path.parent, path.name
        if create:
            parent.mkdir(parents=True, exist_ok=True)
        return os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), name
    within = Path(os.path.abspath(within))
    parts = _lexical_parts(within, path)
    if isinstance(parts, str) or not parts:
        raise UnsafePathError(
            f"{path}: refusing to write outside the run directory {within} "
            f"({parts or 'it is the run directory itself'})"
        )
    fd = os.open(within, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                where = Path(within, *parts[: i + 1])
                raise UnsafePathError(
                    f"{where} is a symbolic link or not a directory (to "
                    f"{_target(where)}); refusing to write {path} through it; remove it and "
                    "run the command again"
                ) from exc
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def _refuse_link_at(fd: int, name: str, path: Path) -> None:
    try:
        st = os.lstat(name, dir_fd=fd)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(
            f"{path} is a symbolic link (to {_target(path)}); refusing to write through it. "
            "Remove it (someone put it there) and run the command again"
        )
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"{path} exists and is not a regular file; refusing to replace it")


@contextlib.contextmanager
def replacing(path: Path, *, within: Path | None, mode: int = 0o644) -> Iterator[IO[bytes]]:
    """A binary file to write; on a normal exit it replaces ``path`` (atomically), on an
    exception it is removed and ``path`` is left as it was. Raises UnsafePathError (see
    the module) and OSError."""
    try:
        fd, name = _open_parent(path, within, create=True)
    except FileNotFoundError as exc:
        raise UnsafePathError(f"{path}: {exc.strerror}") from exc
    tmp = f".{name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        _refuse_link_at(fd, name, path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.fdopen(os.open(tmp, flags, mode, dir_fd=fd), "wb")
        try:
            with out:
                yield out
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            raise
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes | str, *, within: Path | None, mode: int = 0o644) -> Path:
    """Write ``data`` (str as UTF-8) to ``path`` as :func:`replacing` does; returns it."""
    with replacing(path, within=within, mode=mode) as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path


def open_file(path: Path, *, within: Path, limit: int | None = None) -> IO[bytes]:
    """A regular file strictly inside ``within``, opened for reading with no link on the
    way. Raises UnsafePathError (also when larger than ``limit``), FileNotFoundError."""
    fd, name = _open_parent(path, within, create=False)
    try:
        try:
            ffd = os.open(name, _READ_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # the final name is a link
                raise UnsafePathError(
                    f"{path} is a symbolic link (to {_target(path)}); not read"
                ) from exc
            raise
    finally:
        os.close(fd)
    return _regular(ffd, path, limit)


def _regular(fd: int, path: Path, limit: int | None) -> IO[bytes]:
    """``fd`` (opened non-blocking) as a blocking binary reader, if it is a regular file
    of at most ``limit`` bytes; else closed and UnsafePathError."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (limit is not None and st.st_size > limit):
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"{st.st_size} bytes"
        raise UnsafePathError(f"{path} is {what}; not read")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def open_named(path: Path | str, *, limit: int | None = None) -> IO[bytes]:
    """A file the user named (a plan, a key, a report to diff), opened for reading: links
    are followed (the user chose the path), but a FIFO, device, socket or directory is
    refused without blocking, and so is a file larger than ``limit``. Raises
    UnsafePathError, FileNotFoundError, PermissionError."""
    p = Path(path)
    fd = os.open(p, _READ_FLAGS)
    return _regular(fd, p, limit)


def read_named(path: Path | str, *, limit: int | None = None) -> bytes:
    """The bytes of a file the user named (see :func:`open_named`)."""
    with open_named(path, limit=limit) as f:
        return f.read()


def read_bytes(path: Path, *, within: Path, limit: int | None = None) -> bytes:
    """The bytes of a regular file strictly inside ``within``, no link on the way (see
    :func:`open_file`)."""
    with open_file(path, within=within, limit=limit) as f:
        return f.read()
