"""Write measured GPU figures into the front matter of the wiki's reference kernels.

    python3 -m atrex_mcp.wiki.stamp measurements/results/wiki_kernels/2026-11-30_h200.json
    python3 -m atrex_mcp.agentbench.wiki_stamp RUN_DIR [--ops fused_moe,rms_norm] [--kernels DIR]

Reads the report measurements/wiki_kernels_gpu.py writes, or (the second command, through
agentbench's run loaders) a `bench eval` run directory in which the wiki kernels were judged as
one candidate set (atrex_mcp.wiki.stamp_inputs), and, for
each kernel in it, replaces the `[h200]` table (the last table of the front matter) and the
`validated_shapes` line. Only our own measurements go in: which shapes were measured, which
were correct (and how the others failed), per-shape times, the seeds and where the figures come
from, and the operator score S — the latter only when the kernel was run on every scored shape
of its operator; a run over a subset (`--shapes 0`) is stamped as such, with S marked pending.
Per-shape S is never written: with the time it would give away the shape's speed-of-light
figure. A report that claims every scored shape but lacks some, or that measured shapes that
are not scored (a smoke run), is refused and nothing is stamped. From a run, an operator is
stamped only when the judged submission is the wiki kernel (the same text, bar the stamped
table and line); another is refused with its reason and left untouched. The file is re-parsed
after the edit and left untouched if the result is not valid front matter.
Exit status: 0 when every kernel of the input was stamped, 1 when some were refused (each named
with its reason), 2 when the input was refused whole and nothing was stamped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from atrex_mcp.errors import AtrexError
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.wiki.corpus import kernel_front_matter
from atrex_mcp.wiki.stamp_inputs import Inputs, Measured, from_report

_H200_TABLE = re.compile(r"^\[h200\]\n.*?(?=^\+\+\+)", re.S | re.M)
_VALIDATED = re.compile(r"^validated_shapes = .*$", re.M)


def _num(value: float | None) -> str:
    """Three significant digits: enough to compare kernels, no false precision."""
    return "nan" if value is None else format(value, ".3g")


def _ids(ids: list[str]) -> str:
    return "[" + ", ".join(ids) + "]"


def _complete(measured: list[str], scored: list[str]) -> bool:
    return set(measured) == set(scored)


def _validated(entry: dict, scored: list[str], meta: dict) -> str:
    measured = [s["id"] for s in entry["shapes"]]
    failed = [s["id"] for s in entry["shapes"] if not s["correct"]]
    correct = len(measured) - len(failed)
    where = f"{meta.get('gpu') or 'GPU'} {meta['date']}" + (f", {meta['label']}" if meta.get("label") else "")
    if _complete(measured, scored):
        gpu_note = f"{where}: {correct}/{len(scored)} scored shapes correct"
    else:
        gpu_note = f"{where}: measured on shapes {_ids(measured)} of {len(scored)} scored; {correct} correct"
    if failed:
        gpu_note += f" (failed: {', '.join(failed)})"
    return "validated_shapes = " + json.dumps(["smoke (CPU interpreter, CI)", gpu_note], ensure_ascii=False)


def _inline_table(pairs: list[tuple[str, str]]) -> str:
    return "{ " + ", ".join(f"{json.dumps(k)} = {v}" for k, v in pairs) + " }" if pairs else "{}"


def h200_table(entry: dict, scored: list[str], meta: dict) -> str:
    """The [h200] table. The operator score S is written only for a run over every scored shape:
    over a subset it is not the operator's S, and over one shape it is that shape's S, which
    with the shape's time gives away its speed-of-light figure."""
    versions = meta.get("versions") or {}
    measured = [s["id"] for s in entry["shapes"]]
    complete = _complete(measured, scored)
    times = [(s["id"], _num(s["time_ms"])) for s in entry["shapes"] if s["correct"] and s["time_ms"] is not None]
    failures = [
        (s["id"], json.dumps(s.get("category") or s.get("stage") or "failed"))
        for s in entry["shapes"]
        if not s["correct"]
    ]
    lines = [
        "[h200]",
        f"status = {json.dumps('measured' if complete else 'measured on a subset of shapes')}",
        f"date = {json.dumps(meta['date'])}",
        f"gpu = {json.dumps(meta.get('gpu') or '')}",
        f"torch = {json.dumps(versions.get('torch') or '')}",
        f"triton = {json.dumps(versions.get('triton') or '')}",
    ]
    if meta.get("source"):
        lines.append(f"source = {json.dumps(meta['source'], ensure_ascii=False)}")
    if meta.get("seeds"):
        lines.append(f"seeds = {int(meta['seeds'])}")
    lines += [
        f"shapes_measured = {json.dumps(measured)}",
        f"shapes_scored = {len(scored)}",
        f"shapes_correct = {entry['shapes_correct']}",
    ]
    if complete:
        lines.append(f"operator_score = {_num(entry['operator_score'])}")
    else:
        lines.append(
            "operator_score_pending = "
            f"{json.dumps(f'S over the full shape set: pending; measured on shapes {_ids(measured)}')}"
        )
    lines += [
        f"median_time_ms = {_num(entry['median_time_ms'])}",
        f"median_dsl_share = {_num(entry['median_dsl_share'])}",
        f"time_ms = {_inline_table(times)}",
        f"failures = {_inline_table(failures)}",
    ]
    return "\n".join(lines) + "\n"


def unstamped(text: str) -> str:
    """The kernel file without what the stamp writes: equal for two files that differ only in
    their stamped figures."""
    return _VALIDATED.sub("validated_shapes = …", _H200_TABLE.sub("[h200]\n", text, count=1), count=1)


def stamp_kernel(path: Path, entry: dict, scored: list[str], meta: dict) -> None:
    text = path.read_text()
    if not _H200_TABLE.search(text) or not _VALIDATED.search(text):
        raise AtrexError(
            "input", "bad_wiki_kernel", f"{path.name} has no [h200] table or validated_shapes line to stamp."
        )
    new = _H200_TABLE.sub(lambda _: h200_table(entry, scored, meta), text, count=1)
    new = _VALIDATED.sub(lambda _: _validated(entry, scored, meta), new, count=1)
    front, _ = kernel_front_matter(new, path.name)  # raises if the edit broke the TOML
    if front["h200"]["date"] != meta["date"]:
        raise AtrexError("internal", "stamp_failed", f"Stamping {path.name} did not take.")
    path.write_text(new)


def _checked_coverage(name: str, entry: dict, scored: list[str], claims_all: bool) -> None:
    """Every measured shape must be a scored shape, and a run that claims every scored shape must have them."""
    measured = [s["id"] for s in entry["shapes"]]
    stray = [i for i in measured if i not in scored]
    if stray:
        raise AtrexError(
            "input",
            "partial_wiki_report",
            f"{name}: shapes {_ids(stray)} are not scored shapes of {entry['operator']}.",
            "Stamp only runs over scored shapes (not --shapes smoke).",
        )
    if claims_all and not _complete(measured, scored):
        missing = [i for i in scored if i not in measured]
        raise AtrexError(
            "input",
            "partial_wiki_report",
            f"{name}: the report claims every scored shape but lacks {_ids(missing)}; its S would not be the "
            "operator's.",
            "Re-run the kernel over every scored shape, or run with --shapes to label the run as partial.",
        )


def _not_the_kernel(item: Measured, path: Path) -> str | None:
    """Why the judged text is not this wiki kernel (None when it is, bar the stamped figures)."""
    if item.judged_source is None:
        return None
    if not path.is_file():
        return f"no wiki kernel {path.name} in {path.parent}"
    text = path.read_text()
    if unstamped(text) == unstamped(item.judged_source):
        return None
    judged, wiki = (hashlib.sha256(t.encode()).hexdigest()[:12] for t in (item.judged_source, text))
    return f"the judged submission (sha256 {judged}) is not the wiki kernel {path.name} (sha256 {wiki})"


def stamp_measured(inputs: Inputs, kernels_dir: Path, catalog: Catalog) -> list[str]:
    """Check every item first, then stamp: a misleading input leaves every kernel untouched; an
    item whose judged text is not its wiki kernel is moved to inputs.refused and left untouched."""
    todo = []
    for item in inputs.measured:
        path = kernels_dir / f"{item.name}.py"
        reason = _not_the_kernel(item, path)
        if reason is not None:
            inputs.refused[item.name] = reason
            continue
        scored = [s.id for s in catalog.visible(item.entry["operator"]).scored_shapes]
        _checked_coverage(item.name, item.entry, scored, item.claims_all)
        todo.append((path, item, scored))
    for path, item, scored in todo:
        stamp_kernel(path, item.entry, scored, item.meta)
    return [item.name for _, item, _ in todo]


def read_report(source: Path, kernels_dir: Path, only: list[str] | None) -> Inputs:
    """This command's input: a wiki_kernels_gpu.py report (a run directory is agentbench's to read)."""
    if source.is_dir():
        raise AtrexError(
            "input",
            "run_directory",
            f"{source} is a directory; this command reads a wiki_kernels_gpu.py report.",
            f"Stamp from a bench eval run with `python3 -m atrex_mcp.agentbench.wiki_stamp {source}`.",
        )
    if not source.exists():
        raise AtrexError(
            "input",
            "no_stamp_input",
            f"{source} does not exist.",
            "Pass a wiki_kernels_gpu.py report (a bench eval run: python3 -m atrex_mcp.agentbench.wiki_stamp).",
        )
    return from_report(source, only)


Reader = Callable[[Path, Path, list[str] | None], Inputs]


def run_command(argv: list[str] | None, description: str, source_help: str, read: Reader) -> int:
    """A stamp command: SOURCE [--kernels DIR] [--ops a,b]; `read` turns SOURCE into Inputs. Prints
    what was stamped, refused and not judged; exit 0 all stamped, 1 some refused, 2 input refused whole."""
    from atrex_mcp.paths import wiki_dir

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("source", type=Path, help=source_help)
    parser.add_argument("--kernels", type=Path, default=None, help="kernel folder (default: gpu_wiki/kernels)")
    parser.add_argument("--ops", default=None, help="comma-separated kernels to stamp (default: all the input holds)")
    args = parser.parse_args(argv)
    only = [o.strip() for o in args.ops.split(",") if o.strip()] if args.ops else None
    kernels_dir = args.kernels or wiki_dir() / "kernels"
    try:
        inputs = read(args.source, kernels_dir, only)
        inputs.stamped = stamp_measured(inputs, kernels_dir, Catalog())
    except AtrexError as exc:
        print(f"error: {exc.shell_text()}", file=sys.stderr)
        return 2
    print(f"stamped {len(inputs.stamped)} kernels: {', '.join(inputs.stamped)}")
    for name, reason in sorted(inputs.refused.items()):
        print(f"refused {name}: {reason}")
    if inputs.not_judged:
        print(f"not judged in the run (no eval result): {', '.join(inputs.not_judged)}")
    return 1 if inputs.refused else 0


def main(argv: list[str] | None = None) -> int:
    return run_command(argv, __doc__.split("\n")[0], "a wiki_kernels_gpu.py report (JSON)", read_report)


if __name__ == "__main__":
    sys.exit(main())
