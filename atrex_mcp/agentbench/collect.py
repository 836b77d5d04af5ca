"""Collecting an agent's submission: the newest package of its operator in the workspace (what
the `package` or `package_run` tool wrote), read with the server's own path confinement, then
re-packaged on the trusted side, which re-checks the output contract. The trusted copy in
RUN_DIR/ops/<op>/submission/ is what `bench eval` judges; the workspace may change afterwards.
When there is no package but the server refused one (its state directory keeps the last
refusal), the outcome is the contract failure with its rules, lines and fixes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from atrex_mcp.agentbench.models import Submission
from atrex_mcp.candidate_contract import ContractRefused, ContractReport, check_contract
from atrex_mcp.errors import AtrexError
from atrex_mcp.package import ARTIFACT_MANIFEST, last_refusal, package_source
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.workspace import Workspace

PACKAGE_FORMAT = "atrex-mcp package 1"
MAX_MANIFEST_BYTES = 1024 * 1024
MAX_DEPTH = 8


def _manifests(workspace: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(workspace, followlinks=False):
        depth = len(Path(dirpath).relative_to(workspace).parts)
        if depth >= MAX_DEPTH:
            dirnames.clear()
        if ARTIFACT_MANIFEST in filenames:
            path = Path(dirpath) / ARTIFACT_MANIFEST
            if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_MANIFEST_BYTES:
                found.append(path)
    return found


def find_package(workspace: Path, op: str) -> tuple[Path, dict] | None:
    """(artifact path, manifest) of the newest package of `op` in the workspace."""
    candidates = []
    for manifest_path in _manifests(workspace):
        try:
            data = json.loads(manifest_path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or data.get("format") != PACKAGE_FORMAT or data.get("op") != op:
            continue
        name = (data.get("artifact") or {}).get("file")
        if not isinstance(name, str) or Path(name).name != name:
            continue
        artifact = manifest_path.parent / name
        if artifact.is_file() and not artifact.is_symlink():
            candidates.append((str(data.get("created_at") or ""), manifest_path.stat().st_mtime, artifact, data))
    if not candidates:
        return None
    _, _, artifact, data = max(candidates, key=lambda c: (c[0], c[1]))
    return artifact, data


def contract_lines(report: ContractReport) -> list[str]:
    """Each violation as `rule (line N): message — fix: …`."""
    return [f"{v.describe()} — fix: {v.fix}" for v in report.violations]


def collect_submission(
    workspace: Path, op: str, catalog: Catalog, dest: Path, run_root: Path, dsl: str, server_state: Path | None = None
) -> Submission:
    """Find, read and re-package the agent's submission for `op` into `dest`; `server_state` is
    the server's state directory, where a refused package is recorded."""
    found = find_package(workspace, op)
    if found is None:
        refused = last_refusal(server_state, op) if server_state is not None else None
        if refused is not None and not refused.passed:
            return Submission(outcome="contract_failed", violations=contract_lines(refused))
        return Submission(outcome="no_submission")
    artifact, manifest = found
    where = str(artifact.relative_to(workspace))
    text = Workspace([workspace]).read_source(str(artifact))
    matches = hashlib.sha256(text.encode()).hexdigest() == (manifest.get("artifact") or {}).get("sha256")
    report = check_contract(text, catalog.visible(op).reference_source, dsl=dsl)
    if not report.passed:
        return Submission(
            outcome="contract_failed", found=where, matches_manifest=matches, violations=contract_lines(report)
        )
    if dest.exists():
        shutil.rmtree(dest)
    try:
        packaged = package_source(
            text, op, catalog, dest, dsl=dsl, provenance={"collected_from": where, "matches_manifest": matches}
        )
    except ContractRefused as refused:
        return Submission(
            outcome="contract_failed", found=where, matches_manifest=matches, violations=contract_lines(refused.report)
        )
    except AtrexError as exc:
        return Submission(
            outcome="contract_failed", found=where, matches_manifest=matches, violations=[exc.info.message]
        )
    return Submission(
        outcome="submitted",
        found=where,
        artifact=str(Path(packaged.artifact).relative_to(run_root)),
        sha256=packaged.sha256,
        matches_manifest=matches,
    )
