"""Turns files into wiki entries: markdown articles and Triton kernels of gpu_wiki/ (TOML front
matter between `+++` lines), and plain source files of the roots a user adds."""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from atrex_mcp.errors import AtrexError
from atrex_mcp.wiki.models import Kind

CATEGORIES = ("hardware", "patterns", "recipes", "pitfalls", "profiling", "conversion")
OP_FAMILIES = (
    "norm",
    "activation",
    "quant",
    "gemm",
    "moe",
    "attention",
    "rope",
    "topk",
    "conv",
    "linear-attention",
    "cache",
    "any",
)
REQUIRED_DOC_KEYS = ("title", "category", "tags", "op_family", "dsl", "hardware", "sources")
SOURCE_SUFFIXES = frozenset(
    {".py", ".md", ".rst", ".txt", ".cu", ".cuh", ".c", ".cc", ".cpp", ".h", ".hpp", ".ptx", ".mlir", ".ll"}
)
SKIPPED_DIRS = frozenset(
    {".git", "__pycache__", "node_modules", "build", "dist", ".venv", "venv", ".tox", ".mypy_cache"}
)
MAX_SOURCE_BYTES = 1_000_000
_FRONT_MATTER = re.compile(r"\A\s*\+\+\+\s*\n(.*?)\n\+\+\+\s*\n", re.S)
_FENCED_CODE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class WikiFile:
    """A file that belongs in the index, before it is read."""

    doc_id: str
    path: Path
    root: Path
    kind: Kind


@dataclass
class WikiEntry:
    """What the index stores about one file."""

    doc_id: str
    kind: Kind
    category: str
    title: str
    body: str
    code: str
    rel_path: str
    tags: list[str] = field(default_factory=list)
    op_family: list[str] = field(default_factory=list)
    dsl: list[str] = field(default_factory=list)
    hardware: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    operators: list[str] = field(default_factory=list)  # front matter: a kernel's `operator`, an article's `operators`


def split_front_matter(text: str, where: str) -> tuple[dict, str]:
    """The TOML table between the leading `+++` lines, and the text after it."""
    match = _FRONT_MATTER.match(text)
    if not match:
        raise AtrexError(
            "input",
            "bad_wiki_doc",
            f"{where} has no `+++` front matter.",
            "Start the file with a TOML block between two `+++` lines.",
        )
    try:
        meta = tomllib.loads(match.group(1))
    except tomllib.TOMLDecodeError as exc:
        raise AtrexError("input", "bad_wiki_doc", f"Front matter of {where} is not valid TOML: {exc}") from exc
    return meta, text[match.end() :]


def _check_keys(meta: dict, where: str, required: tuple[str, ...]) -> None:
    missing = [k for k in required if k not in meta]
    if missing:
        raise AtrexError("input", "bad_wiki_doc", f"Front matter of {where} lacks {', '.join(missing)}.")
    for key in ("tags", "op_family", "dsl", "hardware", "sources", "operators"):
        if key in meta and not (isinstance(meta[key], list) and all(isinstance(v, str) for v in meta[key])):
            raise AtrexError("input", "bad_wiki_doc", f"Front matter key {key!r} of {where} must be a list of strings.")
    unknown = [f for f in meta.get("op_family", []) if f.lower() not in OP_FAMILIES]
    if unknown:
        raise AtrexError("input", "bad_wiki_doc", f"{where}: op_family {unknown} not among {', '.join(OP_FAMILIES)}.")


def _lower(values: list[str]) -> list[str]:
    return [v.strip().lower() for v in values]


def read_article(file: WikiFile) -> WikiEntry:
    text = file.path.read_text(encoding="utf-8")
    rel = file.path.relative_to(file.root).as_posix()
    meta, body = split_front_matter(text, rel)
    _check_keys(meta, rel, REQUIRED_DOC_KEYS)
    if meta["category"] not in CATEGORIES:
        raise AtrexError(
            "input", "bad_wiki_doc", f"{rel}: category {meta['category']!r} is not one of {', '.join(CATEGORIES)}."
        )
    return WikiEntry(
        doc_id=file.doc_id,
        kind="doc",
        category=meta["category"],
        title=meta["title"],
        body=body,
        code="\n".join(_FENCED_CODE.findall(body)),
        rel_path=rel,
        tags=_lower(meta["tags"]),
        op_family=_lower(meta["op_family"]),
        dsl=_lower(meta["dsl"]),
        hardware=_lower(meta["hardware"]),
        sources=list(meta["sources"]),
        operators=_lower(meta.get("operators", [])),
    )


def kernel_front_matter(source: str, where: str) -> tuple[dict, str]:
    """A kernel file keeps its front matter at the top of its module docstring."""
    try:
        docstring = ast.get_docstring(ast.parse(source), clean=False)
    except SyntaxError as exc:
        raise AtrexError("input", "bad_wiki_kernel", f"{where} is not valid Python: {exc}") from exc
    if not docstring:
        raise AtrexError("input", "bad_wiki_kernel", f"{where} has no module docstring with front matter.")
    return split_front_matter(docstring, where)


def read_kernel(file: WikiFile) -> WikiEntry:
    source = file.path.read_text(encoding="utf-8")
    rel = file.path.relative_to(file.root).as_posix()
    meta, prose = kernel_front_matter(source, rel)
    _check_keys(meta, rel, ("title", "operator", "op_family", "dsl", "hardware", "tags", "sources", "validated_shapes"))
    return WikiEntry(
        doc_id=file.doc_id,
        kind="kernel",
        category="kernels",
        title=meta["title"],
        body=prose,
        code=source,
        rel_path=rel,
        tags=_lower(meta["tags"]) + [meta["operator"].lower()],
        op_family=_lower(meta["op_family"]),
        dsl=_lower(meta["dsl"]),
        hardware=_lower(meta["hardware"]),
        sources=list(meta["sources"]),
        operators=[meta["operator"].lower()],
    )


def _source_dsl(path: Path, text: str) -> list[str]:
    if path.suffix in {".cu", ".cuh"}:
        return ["cuda"]
    if path.suffix == ".py":
        return ["triton"] if "triton.jit" in text else ["pytorch"] if "torch" in text else []
    if path.suffix in {".c", ".cc", ".cpp", ".h", ".hpp"}:
        return ["cuda"] if "__global__" in text else []
    return []


def read_source(file: WikiFile) -> WikiEntry:
    text = file.path.read_text(encoding="utf-8", errors="replace")
    rel = file.path.relative_to(file.root).as_posix()
    return WikiEntry(
        doc_id=file.doc_id,
        kind="source",
        category="source",
        title=rel,
        body=text,
        code=text,
        rel_path=rel,
        dsl=_source_dsl(file.path, text),
    )


READERS = {"doc": read_article, "kernel": read_kernel, "source": read_source}


def wiki_files(wiki_root: Path) -> Iterator[WikiFile]:
    """gpu_wiki/docs/<category>/<slug>.md → docs/<category>/<slug>; gpu_wiki/kernels/<name>.py → kernels/<name>."""
    for path in sorted((wiki_root / "docs").rglob("*.md")):
        yield WikiFile(path.relative_to(wiki_root).with_suffix("").as_posix(), path, wiki_root, "doc")
    for path in sorted((wiki_root / "kernels").glob("*.py")):
        if not path.name.startswith("_"):
            yield WikiFile(f"kernels/{path.stem}", path, wiki_root, "kernel")


def source_files(name: str, root: Path) -> Iterator[WikiFile]:
    """Every readable text file of a known kind under an added root, as `<name>/<relative path>`."""
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIPPED_DIRS or part.startswith(".") for part in rel.parts[:-1]):
            continue
        if path.suffix in SOURCE_SUFFIXES and path.is_file() and path.stat().st_size <= MAX_SOURCE_BYTES:
            yield WikiFile(f"{name}/{rel.as_posix()}", path, root, "source")
