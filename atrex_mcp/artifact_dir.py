"""Writing an artifact folder where an agent can plant links: every step is made relative to a
directory file descriptor opened without following links, so nothing written can land outside
the folder that was checked, and no link or hard link planted in it is written through.

The folder is walked from `/` one component at a time with `O_DIRECTORY | O_NOFOLLOW`; missing
components are created with `mkdir(dir_fd=…)` and opened the same way. A symlink swapped into the
path at any moment makes an open fail instead of being followed, so there is no window between
check and write. Files are created with `O_CREAT | O_EXCL | O_NOFOLLOW` relative to the folder's
fd: an existing name is never opened for writing (a hard link to a protected file would be
written through otherwise); the writer's own earlier files are unlinked first, which removes the
name only.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from atrex_mcp.errors import AtrexError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_HINT = "Pass a new or empty folder inside the workspace (a plain name such as 'atrex-package/mine')."


def _refuse(category: str, why: str) -> AtrexError:
    return AtrexError("input", category, f"The output folder is refused: {why}.", _HINT)


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def _open_dir(parent: int, name: str, *, create: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
    try:
        os.mkdir(name, 0o755, dir_fd=parent)
    except FileExistsError:
        pass  # made by someone else meanwhile: opened below under the same rules
    return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _component_error(parent: int, name: str, exc: OSError) -> AtrexError:
    """Why one component of the folder could not be opened as a folder."""
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except OSError:
        mode = None
    if (mode is not None and stat.S_ISLNK(mode)) or exc.errno == errno.ELOOP:
        return _refuse("output_is_a_link", "a part of it is a symbolic link")
    if mode is not None and not stat.S_ISDIR(mode):
        return _refuse("output_not_a_folder", "a part of it is an existing file, not a folder")
    if exc.errno == errno.ENOENT:
        return _refuse("output_raced", "a part of it was removed while it was opened")
    return _refuse("output_unwritable", f"it cannot be created ({exc.strerror})")


def open_folder(folder: Path, *, denied: Sequence[Path] = ()) -> int:
    """A descriptor of `folder` (absolute, symlink-free), created as needed; every component is
    opened without following links. Refuses a folder inside a denied root, a component that is a
    link or a file."""
    folder = Path(folder)
    if not folder.is_absolute() or any(part in (".", "..") for part in folder.parts):
        raise _refuse("output_path_invalid", "it is not an absolute, normalised path")
    if _inside(folder, [Path(d) for d in denied]):
        raise _refuse("path_outside_workspace", "it lies inside the server's problem set or state")
    fd = os.open("/", _DIR_FLAGS)
    try:
        for name in folder.parts[1:]:
            try:
                child = _open_dir(fd, name, create=True)
            except OSError as exc:
                raise _component_error(fd, name, exc) from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_fresh(folder: Path, files: Mapping[str, bytes], *, denied: Sequence[Path] = ()) -> None:
    """Write `files` (plain names) into `folder`, which must be new, empty, or hold only earlier
    regular files of the same names (replaced: unlinked, then created afresh)."""
    fd = open_folder(folder, denied=denied)
    try:
        present = os.listdir(fd)
        strangers = sorted(name for name in present if name not in files)
        if strangers:
            raise AtrexError(
                "input",
                "output_dir_not_empty",
                f"The output folder holds other files ({len(strangers)}); an artifact is written only "
                "into an empty folder.",
                "Pass a new or empty folder, so no test, log or scratch file travels with the kernel.",
            )
        for name in present:
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISREG(info.st_mode):
                    raise _refuse("output_is_a_link", "it holds a link or special file where the artifact goes")
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                raise _refuse("output_raced", "the folder changed while the artifact was written") from None
        for name, data in files.items():
            if "/" in name or name in ("", ".", ".."):
                raise _refuse("output_path_invalid", "an artifact name is not a plain file name")
            try:
                out = os.open(name, _FILE_FLAGS, 0o644, dir_fd=fd)
            except (FileExistsError, FileNotFoundError):
                raise _refuse("output_raced", "the folder changed while the artifact was written") from None
            with os.fdopen(out, "wb") as handle:
                handle.write(data)
    finally:
        os.close(fd)
