"""The packaged artifact: one kernel file plus its manifest.

`package_source` checks the output contract (atrex_mcp.candidate_contract, the one definition
of a valid candidate) and writes the artifact and a manifest (sha256 hashes, the run's accepted
chain and final figures when it comes from a run) into an otherwise empty directory, so no test,
log or scratch file can travel with it. A top-level `if __name__ == "__main__":` block is
removed from the artifact (and the removal recorded): it is test code, not the kernel.

A refused package is recorded in the server's state directory (`record_refusal`), so a
benchmark run reports the contract failure, not a missing submission.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from atrex_mcp import __version__
from atrex_mcp.artifact_dir import write_fresh
from atrex_mcp.candidate_contract import ContractRefused, ContractReport, check_contract, strip_main_block
from atrex_mcp.problemset.catalog import Catalog

ARTIFACT_MANIFEST = "manifest.json"
REFUSALS_DIR = "package-refusals"


class PackageResult(BaseModel):
    """Where the artifact went and what its manifest says."""

    artifact: str = Field(description="Path of the packaged kernel file.")
    manifest: str = Field(description="Path of manifest.json.")
    sha256: str = Field(description="sha256 of the artifact as written.")
    contract: ContractReport
    manifest_data: dict = Field(description="The manifest's content.")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def package_source(
    source: str,
    op: str,
    catalog: Catalog,
    out_dir: Path,
    *,
    dsl: str = "triton",
    provenance: dict[str, Any] | None = None,
    created_at: str | None = None,
    denied: Sequence[Path] = (),
) -> PackageResult:
    """Check the contract and write `<op>.py` + manifest.json into an empty (or own) directory,
    never inside a problem root of `catalog` or a `denied` root (atrex_mcp.artifact_dir)."""
    reference = catalog.visible(op).reference_source
    artifact_text, removed = strip_main_block(source)
    report = check_contract(source, reference, dsl=dsl)  # lines as submitted; the main block is not judged
    if not report.passed:
        raise ContractRefused(report)
    out_dir = Path(os.path.abspath(out_dir))
    artifact = out_dir / f"{op}.py"
    manifest_path = out_dir / ARTIFACT_MANIFEST
    data = artifact_text.encode()
    manifest: dict[str, Any] = {
        "format": "atrex-mcp package 1",
        "op": op,
        "dsl": dsl,
        "artifact": {"file": artifact.name, "sha256": sha256_bytes(data), "bytes": len(data)},
        "submitted_sha256": sha256_bytes(source.encode()),
        "reference_sha256": sha256_bytes(reference.encode()),
        "contract": {"passed": True, "kernels": report.kernels, "warnings": report.warnings, "removed": removed},
        "created_at": created_at or datetime.now(UTC).isoformat(timespec="milliseconds"),
        "atrex_mcp_version": __version__,
        "run": provenance,
    }
    write_fresh(
        out_dir,
        {artifact.name: data, manifest_path.name: (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()},
        denied=[*catalog.roots, *denied],
    )
    return PackageResult(
        artifact=str(artifact),
        manifest=str(manifest_path),
        sha256=manifest["artifact"]["sha256"],
        contract=report,
        manifest_data=manifest,
    )


def record_refusal(state_dir: Path, op: str, report: ContractReport) -> None:
    """Keep the last contract refusal of `op`'s package (replaced atomically)."""
    folder = Path(state_dir) / REFUSALS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{op}.json"
    partial = folder / f".{op}.{os.getpid()}.partial"
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(report.model_dump_json(indent=1))
    os.replace(partial, path)


def last_refusal(state_dir: Path, op: str) -> ContractReport | None:
    """The contract report of `op`'s last refused package, if the server recorded one."""
    path = Path(state_dir) / REFUSALS_DIR / f"{op}.json"
    if not path.is_file() or path.is_symlink():
        return None
    try:
        return ContractReport.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None
