"""Trusted-side file operations on a directory a candidate could write (a worker's scratch).

The candidate may have replaced any entry with a symbolic link, a hard link to a file
elsewhere, a FIFO or a huge file. So nothing here follows a link, at any component: every
path is opened one component at a time from a directory descriptor with O_NOFOLLOW, the
opened object is checked with fstat, and reads are size-capped. The root passed in is the
trusted side's own directory (it created it); everything beneath it is not.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # O_NONBLOCK: a FIFO does not block the open


class RefusedScratchFile(Exception):
    """An entry under a scratch directory that trusted code will not use (a link, not a
    regular file, hard-linked elsewhere, or too large)."""


def _parts(relative: str | Path) -> list[str]:
    parts = [p for p in Path(relative).parts if p not in ("", ".")]
    if not parts or Path(relative).is_absolute() or ".." in parts:
        raise ValueError(f"not a relative path below the scratch directory: {relative}")
    return parts


def _open_parent(root: Path, parts: list[str]) -> int:
    """A descriptor of the directory holding the last part, reached without following a link."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for name in parts[:-1]:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except OSError as exc:
        os.close(fd)
        if isinstance(exc, FileNotFoundError):
            raise
        raise RefusedScratchFile(f"{'/'.join(parts)}: a component is not a plain directory ({exc.strerror})") from None
    return fd


def _read_fd(fd: int, label: str, max_bytes: int) -> bytes:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise RefusedScratchFile(f"{label}: not a regular file")
    if info.st_nlink != 1:
        raise RefusedScratchFile(f"{label}: hard-linked ({info.st_nlink} names)")
    if info.st_size > max_bytes:
        raise RefusedScratchFile(f"{label}: {info.st_size} bytes, more than the {max_bytes} read")
    chunks, left = [], max_bytes + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    if left <= 0:  # it grew after the fstat
        raise RefusedScratchFile(f"{label}: more than the {max_bytes} bytes read")
    return b"".join(chunks)


def read_bytes(root: Path, relative: str | Path, max_bytes: int) -> bytes | None:
    """The file's bytes, None when it does not exist; RefusedScratchFile when it is a link, not a
    regular file, hard-linked, or larger than `max_bytes`."""
    parts = _parts(relative)
    try:
        parent = _open_parent(root, parts)
    except FileNotFoundError:
        return None
    try:
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: the last component is a symbolic link
        raise RefusedScratchFile(f"{relative}: {'a symbolic link' if exc.errno == 40 else exc.strerror}") from None
    finally:
        os.close(parent)
    try:
        return _read_fd(fd, str(relative), max_bytes)
    finally:
        os.close(fd)


def read_text(root: Path, relative: str | Path, max_bytes: int) -> str | None:
    data = read_bytes(root, relative, max_bytes)
    return None if data is None else data.decode(errors="replace")


def unlink(root: Path, relative: str | Path) -> None:
    """Remove one entry (a link itself, never its target); absent, or reached only through a
    link (nothing of ours is there), is fine."""
    parts = _parts(relative)
    try:
        parent = _open_parent(root, parts)
    except (FileNotFoundError, RefusedScratchFile):
        return
    try:
        os.unlink(parts[-1], dir_fd=parent)
    except FileNotFoundError:
        pass
    finally:
        os.close(parent)


def fresh_directory(root: Path, name: str) -> None:
    """Make root/name a plain directory: whatever else stands there (a planted link) goes."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and not stat.S_ISDIR(info.st_mode):
            os.unlink(name, dir_fd=fd)
            info = None
        if info is None:
            os.mkdir(name, 0o700, dir_fd=fd)
    finally:
        os.close(fd)


def regular_files(root: Path, suffix: str, max_bytes: int, max_files: int = 256) -> Iterator[tuple[str, bytes]]:
    """(relative path, bytes) of every regular file named *suffix below `root`, walking without
    following links; links, hard links and oversized files are skipped."""
    if not os.path.isdir(root) or os.path.islink(root):
        return
    found = 0
    for dirpath, _dirs, files, dirfd in os.fwalk(root, follow_symlinks=False):
        for name in sorted(files):
            if not name.endswith(suffix) or found >= max_files:
                continue
            try:
                fd = os.open(name, _FILE_FLAGS, dir_fd=dirfd)
            except OSError:
                continue
            try:
                data = _read_fd(fd, name, max_bytes)
            except RefusedScratchFile:
                continue
            finally:
                os.close(fd)
            found += 1
            yield os.path.relpath(os.path.join(dirpath, name), root), data


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Give the worker's uid every directory and regular file below `root` (included), never
    through a link: os.fwalk opens each directory without following one and checks it is the
    entry it listed, and each file is changed through its descriptor. A file hard-linked
    elsewhere, a link, or anything else stays as it is."""
    for _path, _dirs, files, dirfd in os.fwalk(root, follow_symlinks=False):
        os.fchown(dirfd, uid, gid)
        for name in files:
            try:
                fd = os.open(name, _FILE_FLAGS, dir_fd=dirfd)
            except OSError:  # a symbolic link (ELOOP) or gone
                continue
            try:
                info = os.fstat(fd)
                if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
                    os.fchown(fd, uid, gid)
            finally:
                os.close(fd)
