"""The output contract and the packaged artifact.

A submission is ONE self-contained Python file: a `Model(nn.Module)` with the reference's
signature, imports only from an allow-list, no file/network/process access, and the target
DSL really used (an @triton.jit kernel that forward reaches). The check is static (AST), so it
runs on the trusted side without importing untrusted code; the evaluator then judges behaviour.

`package_source` writes the artifact and a manifest (sha256 hashes, the run's accepted chain
and final figures when it comes from a run) into an otherwise empty directory, so no test,
log or scratch file can travel with it. A top-level `if __name__ == "__main__":` block is
removed from the artifact (and the removal recorded): it is test code, not the kernel.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from atrex_mcp import __version__
from atrex_mcp.artifact_dir import write_fresh
from atrex_mcp.catalog import Catalog
from atrex_mcp.errors import AtrexError

ALLOWED_IMPORTS = frozenset({
    "__future__", "math", "typing", "functools", "dataclasses", "itertools", "operator", "enum", "numbers",
    "collections", "torch", "triton",
})
# Named so the refusal says why; anything else outside ALLOWED_IMPORTS is refused as "not allowed".
ACCESS_MODULES = frozenset({
    "os", "sys", "io", "socket", "subprocess", "pathlib", "urllib", "requests", "http", "ctypes", "cffi", "importlib",
    "shutil", "pickle", "tempfile", "glob", "builtins", "multiprocessing", "threading", "signal", "mmap", "ssl",
})
FORBIDDEN_NAMES = frozenset({
    "open", "eval", "exec", "compile", "__import__", "input", "breakpoint", "globals", "locals", "vars", "__builtins__",
})
FORBIDDEN_ATTRIBUTES = frozenset({
    "__builtins__", "__globals__", "__subclasses__", "__import__", "__loader__", "__spec__", "__code__", "__closure__",
    "f_globals", "f_locals", "f_back",
})
# Allowed modules with members that read or write files, load native code or reach the network.
FORBIDDEN_MEMBERS = (
    "torch.load", "torch.save", "torch.from_file", "torch.hub", "torch.package", "torch.utils.cpp_extension",
    "torch.utils.data", "torch.ops.load_library", "torch.classes.load_library", "torch.jit.load", "torch.jit.save",
    "torch.distributed", "torch.cuda.memory", "triton.runtime.cache", "triton.tools",
)
DSL_DECORATORS = {"triton": ("triton.jit",)}
MODEL_CLASS = "Model"
ARTIFACT_MANIFEST = "manifest.json"


class Violation(BaseModel):
    rule: str = Field(description="Which contract rule failed: syntax, self_contained, import_not_allowed, file_or_network_access, forbidden_name, forbidden_attribute, dynamic_attribute, no_model, model_not_module, signature_mismatch, dsl_not_used, test_code.")
    message: str = Field(description="What is wrong.")
    line: int | None = Field(default=None, description="Line in the file, where it applies.")


class ContractReport(BaseModel):
    """Result of the output-contract check of one file."""

    passed: bool = Field(description="True when no rule was violated.")
    violations: list[Violation] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list, description="Allowed, but worth knowing (e.g. torch.compile inside the kernel counts as non-DSL time).")
    kernels: list[str] = Field(default_factory=list, description="DSL kernels (@triton.jit) that forward reaches.")


class PackageResult(BaseModel):
    """Where the artifact went and what its manifest says."""

    artifact: str = Field(description="Path of the packaged kernel file.")
    manifest: str = Field(description="Path of manifest.json.")
    sha256: str = Field(description="sha256 of the artifact as written.")
    contract: ContractReport
    manifest_data: dict = Field(description="The manifest's content.")


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """`a.b.c` with the leading name mapped through the file's import aliases."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


def _matches(dotted: str, prefixes: tuple[str, ...]) -> bool:
    return any(dotted == p or dotted.startswith(p + ".") for p in prefixes)


@dataclass
class _Signature:
    names: list[str]
    positional: list[str]
    required: set[str]
    var_keyword: bool


def _signature(fn: ast.FunctionDef) -> _Signature:
    a = fn.args
    positional = [x.arg for x in a.posonlyargs + a.args][1:]  # drop self
    kwonly = [x.arg for x in a.kwonlyargs]
    n_pos_defaults = len(a.defaults)
    required = set(positional[: len(positional) - n_pos_defaults] if n_pos_defaults else positional)
    required |= {x.arg for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is None}
    return _Signature(names=positional + kwonly, positional=positional, required=required, var_keyword=a.kwarg is not None)


def _find_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


class _ContractScan:
    """One pass over a candidate's AST collecting violations."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.violations: list[Violation] = []
        self.warnings: list[str] = []
        self.aliases: dict[str, str] = {}

    def add(self, rule: str, message: str, node: ast.AST | None = None) -> None:
        self.violations.append(Violation(rule=rule, message=message, line=getattr(node, "lineno", None)))

    def imports(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                self.add("self_contained", "relative import: the file must not depend on sibling modules", node)
                continue
            if isinstance(node, ast.Import):
                modules = [(a.name, a.asname or a.name.split(".")[0], a.name if a.asname else a.name.split(".")[0]) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [(f"{node.module}.{a.name}", a.asname or a.name, f"{node.module}.{a.name}") for a in node.names]
            else:
                continue
            for full, bound, target in modules:
                root = full.split(".")[0]
                self.aliases[bound] = target
                if root in ACCESS_MODULES:
                    self.add("file_or_network_access", f"import of {root}: file, process or network access is not allowed", node)
                elif root not in ALLOWED_IMPORTS:
                    self.add("import_not_allowed", f"import of {full}: only {', '.join(sorted(ALLOWED_IMPORTS))} may be imported", node)
                elif _matches(full, FORBIDDEN_MEMBERS):
                    self.add("file_or_network_access", f"import of {full}: it reads or writes files, loads native code or reaches the network", node)

    def names_and_attributes(self) -> None:
        # Only the outermost node of a chain a.b.c is judged as a member, so one use reports once.
        inner = {id(n.value) for n in ast.walk(self.tree) if isinstance(n, ast.Attribute)}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
                self.add("forbidden_name", f"use of {node.id}: no file access, code evaluation or namespace tricks", node)
            elif isinstance(node, ast.Attribute):
                if node.attr in FORBIDDEN_ATTRIBUTES:
                    self.add("forbidden_attribute", f"access to .{node.attr}: reaching interpreter internals is not allowed", node)
                dotted = _dotted(node, self.aliases)
                if dotted and id(node) not in inner and _matches(dotted, FORBIDDEN_MEMBERS):
                    self.add("file_or_network_access", f"use of {dotted}: it reads or writes files, loads native code or reaches the network", node)
                if dotted == "torch.compile":
                    self.warnings.append(f"line {node.lineno}: torch.compile generates Inductor kernels, which count as non-DSL time")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr", "delattr", "hasattr"):
                if len(node.args) < 2 or not (isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                    self.add("dynamic_attribute", f"{node.func.id} with a computed attribute name", node)
                elif node.args[1].value in FORBIDDEN_ATTRIBUTES:
                    self.add("forbidden_attribute", f"{node.func.id}(…, {node.args[1].value!r})", node)

    def test_code(self) -> None:
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                self.add("test_code", f"test function {node.name} in the artifact", node)

    def model(self, reference: ast.Module) -> ast.ClassDef | None:
        cls = _find_class(self.tree, MODEL_CLASS)
        if cls is None:
            self.add("no_model", "no top-level class Model")
            return None
        bases = [_dotted(b, self.aliases) or "" for b in cls.bases]
        if not any(b.endswith("Module") for b in bases):
            self.add("model_not_module", "class Model does not derive from torch.nn.Module", cls)
        ref_cls = _find_class(reference, MODEL_CLASS)
        if ref_cls is None:
            raise AtrexError("internal", "bad_reference", "The reference has no class Model.")
        for method in ("__init__", "forward"):
            self._compare(method, _method(ref_cls, method), _method(cls, method), cls)
        return cls

    def _compare(self, method: str, ref: ast.FunctionDef | None, cand: ast.FunctionDef | None, cls: ast.ClassDef) -> None:
        ref_sig = _signature(ref) if ref else _Signature([], [], set(), False)
        if cand is None:
            if ref_sig.names:
                self.add("signature_mismatch", f"Model has no {method}; the reference's takes {', '.join(ref_sig.names)}", cls)
            return
        sig = _signature(cand)
        missing = [n for n in ref_sig.names if n not in sig.names and not sig.var_keyword]
        extra_required = sorted(sig.required - set(ref_sig.names))
        if missing:
            self.add("signature_mismatch", f"Model.{method} lacks parameter(s) {', '.join(missing)} of the reference", cand)
        if extra_required:
            self.add("signature_mismatch", f"Model.{method} requires parameter(s) {', '.join(extra_required)} the reference does not pass", cand)
        if method == "forward" and not missing and sig.positional[: len(ref_sig.positional)] != ref_sig.positional and not sig.var_keyword:
            self.add("signature_mismatch", f"Model.forward takes ({', '.join(sig.positional)}); the reference's order is ({', '.join(ref_sig.positional)})", cand)

    def dsl(self, cls: ast.ClassDef | None, dsl: str) -> list[str]:
        decorators = DSL_DECORATORS.get(dsl)
        if decorators is None:
            raise AtrexError("input", "unknown_dsl", f"No output contract for DSL {dsl!r}.", f"Known: {', '.join(DSL_DECORATORS)}")
        functions = {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}
        kernels = set()
        for name, fn in functions.items():
            for dec in fn.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if (_dotted(target, self.aliases) or "") in decorators:
                    kernels.add(name)
        if cls is None:
            return []
        forward = _method(cls, "forward")
        if not kernels:
            self.add("dsl_not_used", f"no @{decorators[0]} kernel in the file")
            return []
        if forward is None:
            return []
        methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
        self_kernels = self._self_kernel_attributes(methods.get("__init__"), kernels)
        reached: set[str] = set()
        seen: set[str] = set()
        todo: list[ast.FunctionDef] = [forward]
        while todo:
            fn = todo.pop()
            if fn.name in seen and fn is not forward:
                continue
            seen.add(fn.name)
            for node in ast.walk(fn):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    if node.id in kernels:
                        reached.add(node.id)
                    elif node.id in functions and node.id not in seen:
                        todo.append(functions[node.id])
                elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                    if node.attr in self_kernels:
                        reached.add(self_kernels[node.attr])
                    elif node.attr in methods and node.attr not in seen:
                        todo.append(methods[node.attr])
        if not reached:
            self.add("dsl_not_used", f"Model.forward never reaches a @{decorators[0]} kernel ({', '.join(sorted(kernels))} defined but not launched)", forward)
        return sorted(reached)

    @staticmethod
    def _self_kernel_attributes(init: ast.FunctionDef | None, kernels: set[str]) -> dict[str, str]:
        """`self.k = some_kernel` in __init__: forward may launch it as self.k[grid](…)."""
        found: dict[str, str] = {}
        if init is None:
            return found
        for node in ast.walk(init):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in kernels:
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        found[t.attr] = node.value.id
        return found


def check_contract(source: str, reference_source: str, *, dsl: str = "triton") -> ContractReport:
    """Check one file against the output contract (static; nothing is imported or run)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return ContractReport(passed=False, violations=[Violation(rule="syntax", message=str(exc.msg), line=exc.lineno)])
    scan = _ContractScan(tree)
    scan.imports()
    scan.names_and_attributes()
    scan.test_code()
    cls = scan.model(ast.parse(reference_source))
    kernels = scan.dsl(cls, dsl)
    return ContractReport(passed=not scan.violations, violations=scan.violations, warnings=scan.warnings, kernels=kernels)


def strip_main_block(source: str) -> tuple[str, list[str]]:
    """Remove top-level `if __name__ == "__main__":` blocks; returns the text and what was removed."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source, []
    lines = source.splitlines(keepends=True)
    removed: list[str] = []
    for node in reversed(tree.body):
        test = node.test if isinstance(node, ast.If) else None
        if (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
                and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
                and test.comparators[0].value == "__main__"):
            start, end = node.lineno, node.end_lineno or node.lineno
            del lines[start - 1:end]
            removed.append(f"lines {start}-{end}: if __name__ == '__main__' block")
    return "".join(lines).rstrip() + "\n", list(reversed(removed))


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def package_source(source: str, op: str, catalog: Catalog, out_dir: Path, *, dsl: str = "triton",
                   provenance: dict[str, Any] | None = None, created_at: str | None = None,
                   denied: Sequence[Path] = ()) -> PackageResult:
    """Check the contract and write `<op>.py` + manifest.json into an empty (or own) directory,
    never inside a problem root of `catalog` or a `denied` root (atrex_mcp.artifact_dir)."""
    from atrex_mcp.runs.store import now_iso

    reference = catalog.visible(op).reference_source
    artifact_text, removed = strip_main_block(source)
    report = check_contract(artifact_text, reference, dsl=dsl)
    if not report.passed:
        listing = "; ".join(f"{v.rule}{f' (line {v.line})' if v.line else ''}: {v.message}" for v in report.violations)
        raise AtrexError("policy", "contract_violation", f"The kernel breaks the output contract: {listing}.",
                         "Fix each listed rule; the contract is: one file, Model with the reference's signature, "
                         "allow-listed imports only, no file/network access, a DSL kernel that forward launches.")
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
        "created_at": created_at or now_iso(),
        "atrex_mcp_version": __version__,
        "run": provenance,
    }
    write_fresh(out_dir, {artifact.name: data, manifest_path.name: (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()},
                denied=[*catalog.roots, *denied])
    return PackageResult(artifact=str(artifact), manifest=str(manifest_path), sha256=manifest["artifact"]["sha256"],
                         contract=report, manifest_data=manifest)
