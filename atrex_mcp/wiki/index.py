"""The whoosh index over gpu_wiki/ and the roots a user added: built in a cache directory
(never in the repository), refreshed incrementally by file stat and content hash, searched
with BM25F over title, tags, prose and code, filtered by category, DSL, hardware and family."""

from __future__ import annotations

import difflib
import fcntl
import hashlib
import json
import os
import re
from collections.abc import Collection
from pathlib import Path

from whoosh import highlight, index, scoring
from whoosh.analysis import Filter, LowercaseFilter, RegexTokenizer, StemFilter, StopFilter
from whoosh.fields import ID, KEYWORD, STORED, TEXT, Schema
from whoosh.qparser import MultifieldParser, OrGroup, WildcardPlugin
from whoosh.query import And, Or, Term

from atrex_mcp.errors import AtrexError, unknown_choice
from atrex_mcp.paths import default_state_dir, wiki_dir
from atrex_mcp.wiki.corpus import CATEGORIES, OP_FAMILIES, READERS, WikiEntry, WikiFile, source_files, wiki_files
from atrex_mcp.wiki.models import RefreshReport, WikiDoc, WikiHit
from atrex_mcp.wiki.roots import load_roots
from atrex_mcp.wiki.solutions import solved_names, withheld_error

# Bump when the schema, the analyzer or what a reader extracts changes: the index is rebuilt.
INDEX_VERSION = 4
MANIFEST = "manifest.json"
LOCK_FILE = "refresh.lock"
FILTER_CATEGORIES = (*CATEGORIES, "kernels", "source")
# A filter for one Hopper part also admits documents written for Hopper in general or any GPU.
HARDWARE_ALIASES = {"h200": ("h200", "hopper"), "h100": ("h100", "hopper"), "h20": ("h20", "hopper")}
SEARCH_FIELDS = ("title", "tags", "body", "code")
FIELD_BOOSTS = {"title": 3.0, "tags": 2.5, "body": 1.0, "code": 0.6}
# A kernel whose operator the query names ("rms norm", "rms_norm") is what was asked for: its
# operator term outweighs the near-namesakes (fused_add_rms_norm) that share every word of it.
OPERATOR_BOOST = 16.0
MAX_OPERATOR_WORDS = 6
_TOKEN = r"[A-Za-z0-9]+(?:[._][A-Za-z0-9]+)*"
_FIRST_PARAGRAPH = re.compile(r"^(?!#)(\S.*?)(?:\n\s*\n|\Z)", re.S | re.M)
_LINK_TARGET = re.compile(r"\]\([^)\s]*\)")
_QUERY_WORD = re.compile(r"[a-z0-9]+")


class CompoundPartsFilter(Filter):
    """`tl.dot` and `rms_norm` are also found by their parts (`dot`; `rms`, `norm`) and by the
    parts run together (`tldot`, `rmsnorm`), the way people spell them in questions."""

    def __call__(self, tokens):
        for token in tokens:
            whole = token.text
            yield token
            if "." in whole or "_" in whole:
                parts = [p for p in re.split(r"[._]+", whole) if p]
                for part in [*parts, "".join(parts)]:
                    token.text = part
                    yield token


def _analyzer():
    return RegexTokenizer(_TOKEN) | LowercaseFilter() | CompoundPartsFilter() | StopFilter() | StemFilter()


def _schema() -> Schema:
    words = _analyzer()
    return Schema(
        doc_id=ID(stored=True, unique=True),
        kind=ID(stored=True),
        category=ID(stored=True),
        title=TEXT(stored=True, analyzer=words),
        tags=TEXT(analyzer=words),
        body=TEXT(stored=True, analyzer=words),
        code=TEXT(analyzer=words),
        op_family=KEYWORD(stored=True, commas=True, lowercase=True),
        dsl=KEYWORD(stored=True, commas=True, lowercase=True),
        hardware=KEYWORD(stored=True, commas=True, lowercase=True),
        tag_list=STORED(),
        solves=KEYWORD(commas=True, lowercase=True),  # atrex_mcp.wiki.solutions.solved_names
        operator=KEYWORD(commas=True, lowercase=True),  # a kernel's operator, matched by `_named_operators`
    )


class _MarkFormatter(highlight.Formatter):
    """Wraps matched terms in **…** and keeps the text as written (code stays readable)."""

    between = " … "

    def format_token(self, text, token, replace=False):
        return "**" + highlight.get_text(text, token, replace) + "**"


def _opening(body: str, limit: int = 240) -> str:
    match = _FIRST_PARAGRAPH.search(body)
    text = " ".join((match.group(1) if match else body).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _withholds(record: dict, withheld: Collection[str]) -> bool:
    """Does this manifest record's document solve a withheld operator?"""
    return bool(set(record.get("solves", ())) & {op.lower() for op in withheld})


def _named_operators(query: str) -> list[str]:
    """Every run of consecutive query words joined by `_`: the operator names the query could be
    naming, whether it wrote them with spaces ("paged attention decode") or underscores."""
    words = _QUERY_WORD.findall(query.lower())
    return sorted(
        {
            "_".join(words[i:j])
            for i in range(len(words))
            for j in range(i + 1, min(len(words), i + MAX_OPERATOR_WORDS) + 1)
        }
    )


def _split(stored: str) -> list[str]:
    return [v for v in stored.split(",") if v]


class WikiIndex:
    """Search and read the wiki. Opening it refreshes the index (cheap when nothing changed)."""

    def __init__(self, *, wiki_root: Path | None = None, state_dir: Path | None = None, index_dir: Path | None = None):
        self.wiki_root = Path(wiki_root or wiki_dir()).resolve()
        self.state_dir = Path(state_dir or default_state_dir())
        self.index_dir = Path(index_dir or self.state_dir / "wiki-index")
        self.last_refresh = self.refresh()
        self._ix = index.open_dir(str(self.index_dir))

    # ------------------------------------------------------------------ indexing
    def _files(self) -> list[WikiFile]:
        files = list(wiki_files(self.wiki_root))
        for root in load_roots(self.state_dir):
            if Path(root.path).is_dir():
                files.extend(source_files(root.name, Path(root.path)))
        return files

    def _manifest(self) -> dict:
        try:
            data = json.loads((self.index_dir / MANIFEST).read_text())
        except (OSError, ValueError):
            return {}
        return data["docs"] if data.get("version") == INDEX_VERSION else {}

    def _save_manifest(self, docs: dict) -> None:
        tmp = self.index_dir / f".{MANIFEST}.{os.getpid()}"
        tmp.write_text(json.dumps({"version": INDEX_VERSION, "docs": docs}))
        tmp.replace(self.index_dir / MANIFEST)

    def refresh(self) -> RefreshReport:
        """Index new and changed files, drop vanished ones; a file whose stat changed but whose
        content did not is not re-indexed. Serialised across processes by a lock file, so two
        servers starting at once do not build the same index over each other."""
        self.index_dir.mkdir(parents=True, exist_ok=True)
        with open(self.index_dir / LOCK_FILE, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._refresh_locked()

    def _refresh_locked(self) -> RefreshReport:
        old = self._manifest()
        if not old or not index.exists_in(str(self.index_dir)):
            ix, old = index.create_in(str(self.index_dir), _schema()), {}
        else:
            ix = index.open_dir(str(self.index_dir))
        new: dict[str, dict] = {}
        changed: list[WikiFile] = []
        for f in self._files():
            try:
                st = f.path.stat()
                prev = old.get(f.doc_id)
                record = {
                    "path": str(f.path),
                    "root": str(f.root),
                    "kind": f.kind,
                    "mtime_ns": st.st_mtime_ns,
                    "size": st.st_size,
                }
                if prev and all(prev[k] == record[k] for k in ("path", "mtime_ns", "size")):
                    new[f.doc_id] = prev
                    continue
                record["sha256"] = hashlib.sha256(f.path.read_bytes()).hexdigest()
            except OSError:
                if f.kind == "source":
                    continue
                raise
            new[f.doc_id] = record
            if not prev or prev["sha256"] != record["sha256"] or prev["path"] != record["path"]:
                changed.append(f)
        removed = [doc_id for doc_id in old if doc_id not in new]
        entries = [READERS[f.kind](f) for f in changed]
        for entry in entries:
            new[entry.doc_id]["solves"] = sorted(solved_names(entry))
        if changed or removed:
            writer = ix.writer(timeout=60.0, limitmb=256)
            try:
                for entry in entries:
                    self._add(writer, entry)
                for doc_id in removed:
                    writer.delete_by_term("doc_id", doc_id)
            except BaseException:
                writer.cancel()
                raise
            writer.commit()
        ix.close()
        self._save_manifest(new)
        added = sum(1 for f in changed if f.doc_id not in old)
        return RefreshReport(
            added=added,
            updated=len(changed) - added,
            removed=len(removed),
            unchanged=len(new) - len(changed),
            index_dir=str(self.index_dir),
        )

    @staticmethod
    def _add(writer, e: WikiEntry) -> None:
        writer.update_document(
            doc_id=e.doc_id,
            kind=e.kind,
            category=e.category,
            title=e.title,
            tags=" ".join(e.tags + e.op_family),
            body=_LINK_TARGET.sub("]", e.body),
            code=e.code,
            op_family=",".join(e.op_family),
            dsl=",".join(e.dsl),
            hardware=",".join(e.hardware),
            tag_list=e.tags,
            solves=",".join(sorted(solved_names(e))),
            operator=",".join(e.operators) if e.kind == "kernel" else "",
        )

    # ------------------------------------------------------------------ searching
    def _filter(self, category, dsl, hardware, op_family):
        terms = []
        if category is not None:
            if category not in FILTER_CATEGORIES:
                raise unknown_choice("wiki_category", category, list(FILTER_CATEGORIES))
            terms.append(Term("category", category))
        if dsl is not None:
            terms.append(Or([Term("dsl", dsl.lower()), Term("dsl", "any")]))
        if hardware is not None:
            names = HARDWARE_ALIASES.get(hardware.lower(), (hardware.lower(),))
            terms.append(Or([Term("hardware", n) for n in (*names, "any")]))
        if op_family is not None:
            if op_family.lower() not in OP_FAMILIES:
                raise unknown_choice("op_family", op_family, list(OP_FAMILIES))
            terms.append(Term("op_family", op_family.lower()))
        return And(terms) if terms else None

    def search(
        self,
        query: str,
        *,
        category: str | None = None,
        dsl: str | None = None,
        hardware: str | None = None,
        op_family: str | None = None,
        limit: int = 5,
        withheld: Collection[str] = (),
    ) -> list[WikiHit]:
        """Best matches for a free-text query, most relevant first. `dsl` and `hardware` filters also
        admit documents written for any DSL / any GPU (and `h200`, `h100`, `h20` those for Hopper in
        general); `category` and `op_family` are strict. Documents that solve an operator named in
        `withheld` (atrex_mcp.wiki.solutions) are left out before ranking."""
        if not query.strip():
            raise AtrexError(
                "input",
                "empty_query",
                "The wiki query is empty.",
                "Describe what you need, e.g. 'split-k for skinny fp8 GEMM'.",
            )
        if limit < 1:
            raise AtrexError("input", "bad_limit", f"limit must be at least 1, got {limit}.")
        parser = MultifieldParser(
            list(SEARCH_FIELDS), self._ix.schema, fieldboosts=FIELD_BOOSTS, group=OrGroup.factory(0.9)
        )
        parser.remove_plugin_class(WildcardPlugin)  # an agent's '?' ends a question, it is not a wildcard
        parsed = Or(
            [parser.parse(query), *(Term("operator", name, boost=OPERATOR_BOOST) for name in _named_operators(query))]
        )
        weighting = scoring.BM25F(B=0.75, K1=1.2, title_B=0.3, tags_B=0.3)
        with self._ix.searcher(weighting=weighting) as searcher:
            mask = Or([Term("solves", op.lower()) for op in withheld]) if withheld else None
            results = searcher.search(
                parsed, filter=self._filter(category, dsl, hardware, op_family), mask=mask, limit=limit
            )
            results.fragmenter = highlight.ContextFragmenter(maxchars=300, surround=80)
            results.formatter = _MarkFormatter()
            return [
                WikiHit(
                    doc_id=hit["doc_id"],
                    title=hit["title"],
                    kind=hit["kind"],
                    category=hit["category"],
                    score=round(hit.score, 4),
                    snippet=hit.highlights("body", top=2) or _opening(hit["body"]),
                    tags=list(hit.get("tag_list") or []),
                    op_family=_split(hit["op_family"]),
                    dsl=_split(hit["dsl"]),
                    hardware=_split(hit["hardware"]),
                )
                for hit in results
            ]

    def read(self, doc_id: str, *, withheld: Collection[str] = ()) -> WikiDoc:
        """The whole document (an article without its front matter, which the fields carry); an
        unknown id is answered with the closest known ones. A document
        that solves an operator named in `withheld` is refused (atrex_mcp.wiki.solutions)."""
        docs = self._manifest()
        record = docs.get(doc_id.strip().removesuffix(".md"))
        if record is None:
            readable = [d for d, r in docs.items() if not _withholds(r, withheld)]
            close = difflib.get_close_matches(doc_id, readable, n=5, cutoff=0.4)
            raise AtrexError(
                "input",
                "unknown_wiki_doc",
                "No wiki document has that id.",
                f"Did you mean: {', '.join(close)}?"
                if close
                else "Search first (wiki_search) and pass a hit's doc_id.",
            )
        f = WikiFile(doc_id.strip().removesuffix(".md"), Path(record["path"]), Path(record["root"]), record["kind"])
        try:
            entry = READERS[f.kind](f)
            text = f.path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise AtrexError(
                "input",
                "wiki_doc_gone",
                f"The file of {f.doc_id} cannot be read: {exc}",
                "Run `atrex-mcp wiki index` to refresh.",
            ) from exc
        if _withholds(record, withheld):
            raise withheld_error()
        if f.kind == "doc":  # every key of an article's front matter is a field of the answer
            text = entry.body
        return WikiDoc(
            doc_id=entry.doc_id,
            title=entry.title,
            kind=entry.kind,
            category=entry.category,
            tags=entry.tags,
            op_family=entry.op_family,
            dsl=entry.dsl,
            hardware=entry.hardware,
            sources=entry.sources,
            path=entry.rel_path,
            text=text,
        )
