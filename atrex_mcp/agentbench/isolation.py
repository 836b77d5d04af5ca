"""Keeping the agent away from evaluator-only state.

The strong setup: the agent runs as a uid of its own, the MCP server (holding the problem set
with its hidden files) runs as another user, and the agent reaches it only over loopback HTTP
with a bearer token. `bench run` sets this up by itself when started as root: the agent runs as
uid 65534 in a workspace it owns, the server runs as root over HTTP, and every hidden file is
checked for readability by the agent's uid. Without root the agent shares the server's uid and
could read the hidden files; the run records that as a warning (docs/bench.md says how to get
the strong setup without root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from atrex_mcp.agentbench.models import Isolation, ServerTransport
from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.catalog import HIDDEN_FILES, WEIGHTS_FILE

NOBODY = 65534
_CHECK_TIMEOUT_S = 30


@dataclass(frozen=True)
class AgentIdentity:
    uid: int
    gid: int

    @property
    def switched(self) -> bool:
        """The agent runs as another uid than this process."""
        return self.uid != os.geteuid()

    def popen_kwargs(self) -> dict:
        """What subprocess.Popen needs to start a process as this identity."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []} if self.switched else {}


def accessible_to(identity: AgentIdentity, paths: Iterable[Path], test: str = "-r") -> list[Path]:
    """The paths `identity` can access (`test -r`, `-x`, …), asked of the kernel by a shell
    running as that uid, so directory permissions on the way count too."""
    paths = [Path(p) for p in paths]
    if not paths:
        return []
    if not identity.switched:
        mode = {"-r": os.R_OK, "-x": os.X_OK, "-w": os.W_OK}[test]
        return [p for p in paths if os.access(p, mode)]
    script = f'for p in "$@"; do [ {test} "$p" ] && printf "%s\\0" "$p"; done; exit 0'
    result = subprocess.run(
        ["/bin/sh", "-c", script, "sh", *map(str, paths)],
        capture_output=True,
        timeout=_CHECK_TIMEOUT_S,
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        **identity.popen_kwargs(),
    )
    return [Path(p) for p in result.stdout.decode().split("\0") if p]


def hidden_files(roots: Iterable[Path], ops: Iterable[str]) -> list[Path]:
    """The evaluator-only files of `ops` under every root (metadata, roofline, weights)."""
    ops = list(ops)
    found: list[Path] = []
    for root in roots:
        root = Path(root)
        found += [root / op / name for op in ops for name in HIDDEN_FILES if (root / op / name).is_file()]
        if (root / WEIGHTS_FILE).is_file():
            found.append(root / WEIGHTS_FILE)
    return found


def choose_identity(requested: str, executable: Path | None) -> tuple[AgentIdentity, list[str]]:
    """The uid the agent runs as: `auto` = 65534 when this process is root and that uid can run
    the agent's executable, else this uid; `same`; or a number (root only)."""
    me = AgentIdentity(os.geteuid(), os.getegid())
    if requested == "same":
        return me, []
    root = os.geteuid() == 0
    if requested == "auto":
        if not root:
            return me, [
                "not running as root: the agent runs as the server's uid and could read the hidden files "
                "(see docs/bench.md, 'The strong setup')"
            ]
        target = AgentIdentity(NOBODY, NOBODY)
        if executable is not None and not accessible_to(target, [executable.resolve()], "-x"):
            return me, [
                f"uid {NOBODY} cannot run {executable} (e.g. an interpreter under /root): the agent runs as "
                f"uid {me.uid} and could read the hidden files; install the agent where uid {NOBODY} can run it"
            ]
        return target, []
    try:
        uid = int(requested)
    except ValueError:
        raise AtrexError(
            "input", "bad_agent_uid", f"--agent-uid must be auto, same or a number, not {requested!r}."
        ) from None
    if uid != me.uid and not root:
        raise AtrexError(
            "input",
            "agent_uid_needs_root",
            f"Running the agent as uid {uid} needs root.",
            "Run bench as root, or use --agent-uid same (weaker: see docs/bench.md).",
        )
    target = AgentIdentity(uid, uid)
    if executable is not None and not accessible_to(target, [executable.resolve()], "-x"):
        raise AtrexError(
            "input",
            "agent_not_runnable",
            f"uid {uid} cannot run {executable}.",
            "Install the agent where that uid can read and execute it.",
        )
    return target, []


def choose_transport(requested: str, identity: AgentIdentity) -> ServerTransport:
    """stdio when the agent shares the server's uid (its CLI starts the server); HTTP when the
    agent runs as another uid, since a server it started would run as that uid and could not read
    the problem set it has to guard."""
    if requested == "auto":
        return "http" if identity.switched else "stdio"
    if requested == "stdio" and identity.switched:
        raise AtrexError(
            "input",
            "stdio_needs_same_uid",
            "A stdio server is started by the agent and would run as the agent's uid.",
            "Use --server http (the default when the agent runs as another uid).",
        )
    return requested  # type: ignore[return-value]


def describe(
    identity: AgentIdentity, transport: ServerTransport, readable: list[Path], warnings: list[str]
) -> Isolation:
    """The run's Isolation record: what holds, and every way it is weaker than the strong setup."""
    warnings = list(warnings)
    if readable:
        shown = ", ".join(str(p) for p in readable[:3]) + (
            f" and {len(readable) - 3} more" if len(readable) > 3 else ""
        )
        warnings.append(
            f"the agent's uid {identity.uid} can read {len(readable)} evaluator-only file(s): {shown}"
            + (
                "; make every copy of the problem set unreadable to that uid (chmod -R o-rwx on each problem root, "
                "including the installed default)"
                if identity.switched
                else ""
            )
        )
    return Isolation(
        agent_uid=identity.uid,
        agent_gid=identity.gid,
        server_uid=os.geteuid(),
        transport=transport,
        hidden_readable=[str(p) for p in readable],
        warnings=warnings,
    )


def hand_over(path: Path, identity: AgentIdentity) -> None:
    """Make `path` (a fresh directory tree) the agent's own, private to it."""
    path.chmod(0o700)
    if not identity.switched:
        return
    for dirpath, _dirnames, filenames in os.walk(path):
        os.chown(dirpath, identity.uid, identity.gid)
        for name in filenames:
            os.chown(os.path.join(dirpath, name), identity.uid, identity.gid, follow_symlinks=False)


def which(name: str, path: str | None = None) -> Path | None:
    found = shutil.which(name, path=path)
    return Path(found) if found else None
