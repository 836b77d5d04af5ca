"""Write measured GPU figures into the front matter of the wiki's reference kernels.

    python3 -m atrex_mcp.wiki.stamp bench/results/wiki_kernels_h200.json

Reads the report bench/wiki_kernels_gpu.py writes and, for each kernel in it, replaces the
`[h200]` table (the last table of the front matter) and the `validated_shapes` line. Only our
own measurements go in — per-shape times and the operator score S — never per-shape S, which
with the time would give away the shape's speed-of-light figure. The file is re-parsed after
the edit and left untouched if the result is not valid front matter.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from atrex_mcp.errors import AtrexError
from atrex_mcp.wiki.corpus import kernel_front_matter

_H200_TABLE = re.compile(r"^\[h200\]\n.*?(?=^\+\+\+)", re.S | re.M)
_VALIDATED = re.compile(r"^validated_shapes = .*$", re.M)


def _num(value: float | None) -> str:
    """Three significant digits: enough to compare kernels, no false precision."""
    return "nan" if value is None else format(value, ".3g")


def _validated(entry: dict, date: str, gpu: str) -> str:
    correct = [s["id"] for s in entry["shapes"] if s["correct"]]
    failed = [s["id"] for s in entry["shapes"] if not s["correct"]]
    gpu_note = f"{gpu} {date}: {len(correct)}/{entry['shapes_total']} scored shapes correct"
    if failed:
        gpu_note += f" (failed: {', '.join(failed)})"
    return "validated_shapes = " + json.dumps(["smoke (CPU interpreter, CI)", gpu_note], ensure_ascii=False)


def h200_table(entry: dict, meta: dict) -> str:
    versions = meta.get("versions") or {}
    times = ", ".join(f"{json.dumps(s['id'])} = {_num(s['time_ms'])}" for s in entry["shapes"]
                      if s["correct"] and s["time_ms"] is not None)
    lines = [
        "[h200]",
        'status = "measured"',
        f"date = {json.dumps(meta['date'])}",
        f"gpu = {json.dumps(meta.get('gpu') or '')}",
        f"torch = {json.dumps(versions.get('torch') or '')}",
        f"triton = {json.dumps(versions.get('triton') or '')}",
        f"shapes_correct = {entry['shapes_correct']}",
        f"shapes_total = {entry['shapes_total']}",
        f"operator_score = {_num(entry['operator_score'])}",
        f"median_time_ms = {_num(entry['median_time_ms'])}",
        f"median_dsl_share = {_num(entry['median_dsl_share'])}",
        f"time_ms = {{ {times} }}",
    ]
    return "\n".join(lines) + "\n"


def stamp_kernel(path: Path, entry: dict, meta: dict) -> None:
    text = path.read_text()
    if not _H200_TABLE.search(text) or not _VALIDATED.search(text):
        raise AtrexError("input", "bad_wiki_kernel", f"{path.name} has no [h200] table or validated_shapes line to stamp.")
    new = _H200_TABLE.sub(lambda _: h200_table(entry, meta), text, count=1)
    new = _VALIDATED.sub(lambda _: _validated(entry, meta["date"], meta.get("gpu") or "GPU"), new, count=1)
    front, _ = kernel_front_matter(new, path.name)  # raises if the edit broke the TOML
    if front["h200"]["status"] != "measured":
        raise AtrexError("internal", "stamp_failed", f"Stamping {path.name} did not take.")
    path.write_text(new)


def stamp(report_path: Path, kernels_dir: Path) -> list[str]:
    report = json.loads(report_path.read_text())
    if report["meta"].get("shapes", "all scored") != "all scored":
        raise AtrexError("input", "partial_wiki_report", f"{report_path} covers shapes {report['meta']['shapes']!r} only.",
                         "Stamp only a run over every scored shape (bench/wiki_kernels_gpu.py without --shapes).")
    done = []
    for name, entry in sorted(report["kernels"].items()):
        if "error" in entry or not entry.get("shapes"):
            continue
        stamp_kernel(kernels_dir / f"{name}.py", entry, report["meta"])
        done.append(name)
    return done


def main(argv: list[str] | None = None) -> int:
    from atrex_mcp.paths import wiki_dir

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("report", type=Path, help="bench/results/wiki_kernels_h200.json")
    parser.add_argument("--kernels", type=Path, default=None, help="kernel folder (default: gpu_wiki/kernels)")
    args = parser.parse_args(argv)
    try:
        done = stamp(args.report, args.kernels or wiki_dir() / "kernels")
    except AtrexError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"stamped {len(done)} kernels: {', '.join(done)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
