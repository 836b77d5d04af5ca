"""The JSON shapes the wiki returns to tools and the CLI."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Kind = Literal["doc", "kernel", "source"]


class WikiHit(BaseModel):
    """One search result: enough to decide whether to read the document."""

    doc_id: str = Field(
        description="Stable document id, e.g. 'docs/patterns/split-k' or 'kernels/rms_norm'; pass it to wiki_read."
    )
    title: str = Field(description="Document title.")
    kind: Kind = Field(
        description=(
            "doc: a written article; kernel: a validated Triton reference kernel; source: a file from a root the "
            "user added."
        )
    )
    category: str = Field(
        description="hardware, patterns, recipes, pitfalls, profiling, conversion, kernels or source."
    )
    score: float = Field(
        description="BM25F relevance score; only meaningful relative to the other hits of the same query."
    )
    snippet: str = Field(
        description=(
            "The passages that matched, query terms wrapped in **…**; the opening text when only the title or tags "
            "matched."
        )
    )
    tags: list[str] = Field(default_factory=list, description="Free keywords from the front matter.")
    op_family: list[str] = Field(
        default_factory=list, description="Operator families the document is about (norm, gemm, attention, …)."
    )
    dsl: list[str] = Field(
        default_factory=list, description="Languages the document applies to (triton, cuda, pytorch, any)."
    )
    hardware: list[str] = Field(
        default_factory=list, description="Hardware it applies to (h200, h100, h20, hopper, any)."
    )


class WikiDoc(BaseModel):
    """A whole document, as stored on disk."""

    doc_id: str = Field(description="Stable document id.")
    title: str = Field(description="Document title.")
    kind: Kind = Field(description="doc, kernel or source.")
    category: str = Field(description="Category (see WikiHit.category).")
    tags: list[str] = Field(default_factory=list, description="Free keywords from the front matter.")
    op_family: list[str] = Field(default_factory=list, description="Operator families the document is about.")
    dsl: list[str] = Field(default_factory=list, description="Languages the document applies to.")
    hardware: list[str] = Field(default_factory=list, description="Hardware it applies to.")
    sources: list[str] = Field(
        default_factory=list,
        description="Where its facts come from (vendor documents, papers, manuals), each a title and URL.",
    )
    path: str = Field(
        description="File path relative to its root (the wiki, or the added root named by the id's first part)."
    )
    text: str = Field(
        description=(
            "The file's content. An article's starts after its front matter (every key of which is a field above); a "
            "kernel's is the whole Python file, whose docstring front matter also holds the operator, validated "
            "shapes and measured figures."
        )
    )


class WikiRoot(BaseModel):
    """A folder the user added to the wiki; its files are indexed as source."""

    name: str = Field(
        description="First part of the ids of its documents, e.g. 'vllm' in 'vllm/csrc/layernorm_kernels.cu'."
    )
    path: str = Field(description="Absolute path of the folder.")


class RefreshReport(BaseModel):
    """What an index refresh changed."""

    added: int = Field(description="Documents indexed for the first time.")
    updated: int = Field(description="Documents whose content changed and were re-indexed.")
    removed: int = Field(description="Documents whose file disappeared.")
    unchanged: int = Field(description="Documents left as they were.")
    index_dir: str = Field(description="Where the index lives.")
