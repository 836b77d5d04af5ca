"""Path confinement for tool arguments: a path an agent passes may only name a regular file
inside an allowed workspace root, never one inside a denied root (the problem set with its
hidden files, the server's state), and never by way of a symlink, a hard link or `..` that
leaves the root.

The check is made on the file actually opened (its /proc/self/fd link on Linux), so swapping a
path component for a symlink between the check and the read does not get around it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from atrex_mcp.errors import AtrexError

DEFAULT_MAX_SOURCE_BYTES = 256 * 1024


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


class Workspace:
    """The roots a tool may read candidate files from and write artifacts into."""

    def __init__(
        self, roots: Sequence[Path], denied: Sequence[Path] = (), max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES
    ):
        if not roots:
            raise AtrexError("input", "no_workspace", "At least one workspace root is needed.", "Pass --workspace DIR.")
        self.roots = [Path(r).resolve() for r in roots]
        self.denied = [Path(d).resolve() for d in denied]
        self.max_source_bytes = max_source_bytes

    def _refuse(self, path: str, why: str) -> AtrexError:
        shown = ", ".join(str(r) for r in self.roots)
        return AtrexError(
            "input",
            "path_outside_workspace",
            f"The path is refused: {why}.",  # never the caller's text: an error echoes nothing back
            f"Pass a path to a file inside a workspace root ({shown}), or pass the source text itself.",
        )

    def _check(self, original: str, real: Path) -> None:
        if not _inside(real, self.roots):
            raise self._refuse(original, "it resolves outside the workspace roots")
        if _inside(real, self.denied):
            raise self._refuse(original, "it points into the server's problem set or state")

    def resolve(self, path: str, *, must_exist: bool = True) -> Path:
        """The absolute, symlink-free form of `path` (relative paths start at the first root)."""
        if not path or "\x00" in path:
            raise self._refuse(path, "it is empty or contains a NUL byte")
        candidate = Path(path).expanduser()
        if not candidate.is_absolute():
            candidate = self.roots[0] / candidate
        try:
            real = candidate.resolve(strict=must_exist)
        except FileNotFoundError:
            raise AtrexError(
                "input",
                "file_not_found",
                "No file at the given path.",
                "Check the path; relative paths start at the first workspace root.",
            ) from None
        except (OSError, RuntimeError) as exc:
            raise self._refuse(path, f"it cannot be resolved ({exc.__class__.__name__})") from None
        self._check(path, real)
        return real

    def _too_large(self, size: int, what: str) -> AtrexError:
        return AtrexError(
            "input",
            "source_too_large",
            f"The {what} is {size} bytes; the limit is {self.max_source_bytes} bytes.",
            "Submit one self-contained kernel file; drop unused code and large embedded data.",
        )

    def check_source(self, text: str, what: str = "source") -> str:
        """Refuse a source text over the size limit."""
        size = len(text.encode("utf-8", errors="replace"))
        if size > self.max_source_bytes:
            raise self._too_large(size, what)
        return text

    def read_source(self, path: str) -> str:
        """Read a UTF-8 source file from the workspace, confined and size-limited."""
        real = self.resolve(path)
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise self._refuse(path, f"it cannot be opened ({exc.strerror})") from None
        try:
            info = os.fstat(fd)
            proc_link = Path(f"/proc/self/fd/{fd}")
            opened = Path(os.readlink(proc_link)) if proc_link.is_symlink() else real
            self._check(path, opened)
            if not stat.S_ISREG(info.st_mode):
                raise self._refuse(path, "it is not a regular file")
            if info.st_nlink > 1:  # another name may be a hidden file: its path says nothing about where it lives
                raise AtrexError(
                    "input",
                    "hard_link",
                    f"The file is refused: it is a hard link ({info.st_nlink} names for one file), "
                    "and a hard link can name a file outside the workspace.",
                    "Pass a copy (cp FILE NEW.py) or the source text itself.",
                )
            if info.st_size > self.max_source_bytes:
                raise self._too_large(info.st_size, "file")
            with os.fdopen(os.dup(fd), "rb") as handle:
                data = handle.read(self.max_source_bytes + 1)
        finally:
            os.close(fd)
        try:
            return self.check_source(data.decode("utf-8"), "file")
        except UnicodeDecodeError:
            raise AtrexError("input", "not_utf8", "The file is not UTF-8 text.", "Pass a Python source file.") from None

    def output_path(self, path: str) -> Path:
        """Where a tool may write: the deepest existing folder of `path` is resolved and confined;
        the parts below it (created by the writer) must be plain names."""
        if not path or "\x00" in path:
            raise self._refuse(path, "it is empty or contains a NUL byte")
        candidate = Path(path).expanduser()
        if not candidate.is_absolute():
            candidate = self.roots[0] / candidate
        missing: list[str] = []
        existing = candidate
        while not existing.exists() and not existing.is_symlink():
            missing.insert(0, existing.name)
            existing = existing.parent
        if any(part in ("", ".", "..") for part in missing):
            raise self._refuse(path, "it uses '.' or '..' below its existing folders")
        if existing.is_symlink() and not missing:
            raise self._refuse(path, "it is a symlink")
        target = existing.resolve().joinpath(*missing)
        self._check(path, target)
        return target
