"""`atrex-mcp wiki search|read|add-root|index`: the GPU wiki from a shell."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from atrex_mcp.commands.grammar import add_state_dir_option, count, shared_options


def register(subparsers) -> None:
    parser = subparsers.add_parser("wiki", help="search and read the GPU optimisation wiki")
    sub = parser.add_subparsers(dest="wiki_command", metavar="ACTION", required=True)

    search = sub.add_parser("search", help="full-text search")
    search.add_argument("query", help="free text, e.g. 'split-k for skinny fp8 GEMM'")
    search.add_argument(
        "--category", help="hardware, patterns, recipes, pitfalls, profiling, conversion, kernels or source"
    )
    search.add_argument("--dsl", help="e.g. triton, cuda")
    search.add_argument("--hardware", help="e.g. h200, h100, h20")
    search.add_argument("--op-family", help="e.g. norm, gemm, attention, moe")
    search.add_argument("--limit", type=count(1, 100), default=5, help="hits to show (default 5)")
    search.add_argument("--json", action="store_true", help="print the hits as JSON")

    read = sub.add_parser("read", help="print one document")
    read.add_argument("doc_id", help="a hit's doc_id, e.g. docs/patterns/split-k")
    read.add_argument("--json", action="store_true", help="print the document as JSON")

    add = sub.add_parser("add-root", help="index a folder (e.g. an upstream checkout) as source")
    add.add_argument("path", type=Path)
    add.add_argument("--name", help="id prefix of its documents (default: the folder's name)")

    index = sub.add_parser("index", help="bring the index up to date and report what changed")
    shared_options(parser, [search, read, add, index], _add_dirs)
    parser.set_defaults(func=run)


def _add_dirs(parser: argparse.ArgumentParser, after_action: bool) -> None:
    add_state_dir_option(parser, after_action)
    parser.add_argument(
        "--index-dir",
        type=Path,
        default=argparse.SUPPRESS if after_action else None,
        help="where the search index lives (default: <state dir>/wiki-index)",
    )


def run(args: argparse.Namespace) -> int:
    from atrex_mcp.paths import default_state_dir
    from atrex_mcp.wiki.index import WikiIndex
    from atrex_mcp.wiki.roots import add_root

    state_dir = args.state_dir or default_state_dir()
    if args.wiki_command == "add-root":
        root = add_root(state_dir, args.path, args.name)
        report = WikiIndex(state_dir=state_dir, index_dir=args.index_dir).last_refresh
        print(
            f"added {root.name} = {root.path}; indexed {report.added} new, {report.updated} changed, "
            f"{report.removed} removed"
        )
        return 0
    wiki = WikiIndex(state_dir=state_dir, index_dir=args.index_dir)
    if args.wiki_command == "index":
        print(wiki.last_refresh.model_dump_json(indent=2))
    elif args.wiki_command == "search":
        hits = wiki.search(
            args.query,
            category=args.category,
            dsl=args.dsl,
            hardware=args.hardware,
            op_family=args.op_family,
            limit=args.limit,
        )
        if args.json:
            print(json.dumps([h.model_dump() for h in hits], indent=2))
        for rank, h in enumerate([] if args.json else hits, 1):
            print(f"{rank}. {h.doc_id}  [{h.category}]  {h.title}  (score {h.score:.2f})")
            print("   " + " ".join(h.snippet.split()) + "\n")
        if not hits and not args.json:
            print("no matches")
    else:
        doc = wiki.read(args.doc_id)
        print(doc.model_dump_json(indent=2) if args.json else doc.text)
    return 0
