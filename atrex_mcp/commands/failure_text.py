"""A failed shape written out as a test failure reads: stage and category, the mismatch figures,
and the tail of the candidate's traceback under the user's own file name.

The worker imports the candidate from its scratch folder as candidate.py; the names it reports
are mapped back to the user's path here, for display only (nothing the worker says about paths
is used for anything else). A syntax error's line is shown from the user's file as the trusted
side read it."""

from __future__ import annotations

import re
from pathlib import Path

from atrex_mcp.errors import ErrorInfo
from atrex_mcp.evaluate.models import EvalResult, MismatchDetail, ShapeResult

SANDBOX_NAME = re.compile(r"""(?<![\w.-])(?:[^\s"'(),:]*/)?candidate\.py\b""")
FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+)')
LINE_NO = re.compile(r"line (\d+)")
SEED = re.compile(r"(seed #\d+)")
TAIL_FRAMES = 6


def user_names(text: str, user_file: str) -> str:
    """The worker's candidate.py (any folder) shown as the user's file."""
    return SANDBOX_NAME.sub(lambda _: user_file, text)


def traceback_tail(text: str, user_file: str) -> list[str]:
    """The frames from the first one in the user's file on (at most TAIL_FRAMES, the last ones)
    and the exception line, of the exception that ended the call (the last traceback of a chain);
    [] when the text holds no traceback."""
    lines = user_names(text, user_file).splitlines()
    starts = [i for i, line in enumerate(lines) if line == "Traceback (most recent call last):"]
    if not starts:
        return []
    body = lines[starts[-1] + 1 :]
    frames: list[list[str]] = []
    ending: list[str] = []
    for line in body:
        if FRAME.match(line):
            frames.append([line])
        elif line.startswith("    ") and frames and not ending:
            frames[-1].append(line)
        elif line.strip():
            ending.append(line)
    own = [i for i, f in enumerate(frames) if (m := FRAME.match(f[0])) is not None and m["file"] == user_file]
    kept = frames[own[0] :] if own else frames
    out = [line for frame in kept[-TAIL_FRAMES:] for line in frame if line.strip(" ^~")]
    return out + ending[-3:]


def mismatch_line(m: MismatchDetail) -> str:
    where = ""
    if m.first_bad_index is not None:
        where = f"; first bad index {m.first_bad_index}"
        if m.candidate_value is not None and m.reference_value is not None:
            where += f": got {m.candidate_value:.6g}, expected {m.reference_value:.6g}"
    tolerance = f" (atol {m.atol:.3g}, rtol {m.rtol:.3g})" if m.atol is not None and m.rtol is not None else ""
    nonfinite = f"; {m.nonfinite_mismatches} NaN/inf mismatches" if m.nonfinite_mismatches else ""
    return (
        f"{m.output} [{m.rule}{tolerance}]: max abs error {m.max_abs_error:.4g}, "
        f"max rel error {m.max_rel_error:.4g}, {m.mismatches}/{m.numel} mismatched ({m.mismatch_fraction:.2%})"
        f"{where}{nonfinite}"
    )


def _source_line(source: str | None, message: str) -> list[str]:
    found = LINE_NO.search(message)
    if source is None or not found:
        return []
    number = int(found.group(1))
    lines = source.splitlines()
    return [f"{number:>5} | {lines[number - 1]}"] if 1 <= number <= len(lines) else []


def _message_lines(message: str, user_file: str, source: str | None, category: str | None) -> list[str]:
    shown = user_names(message, user_file)
    head = shown.split("\nTraceback (most recent call last):")[0].strip()
    lines = head.splitlines()[:4] if head else []
    if category == "syntax_error":
        lines += _source_line(source, shown)
    return lines + traceback_tail(message, user_file)


def compile_failure(error: ErrorInfo, user_file: str, source: str | None) -> list[str]:
    lines = [f"FAILED compile: {error.stage}/{error.category}"]
    lines += [f"    {line}" for line in _message_lines(error.message, user_file, source, error.category)]
    return lines + ([f"    hint: {error.hint}"] if error.hint else [])


def shape_failure(shape: ShapeResult, user_file: str, source: str | None) -> list[str]:
    lines = [f"FAILED shape {shape.id}: {shape.stage}/{shape.category}"]
    lines += [f"    {mismatch_line(m)}" for m in shape.mismatch]
    message = shape.message if not shape.mismatch else shape.message.split("\n")[0]
    seed = SEED.match(message)
    if shape.mismatch and seed:
        lines[0] += f" ({seed.group(1)})"
    else:
        lines += [f"    {line}" for line in _message_lines(message, user_file, source, shape.category)]
    return lines


def failure_report(result: EvalResult, candidate: Path | None, source: str | None) -> list[str]:
    """Every failure of the result, compile error first; [] when every judged shape passed."""
    user_file = str(candidate) if candidate is not None else "reference.py"
    lines: list[str] = []
    if result.compile_error is not None:
        lines += compile_failure(result.compile_error, user_file, source)
    shown_compile = result.compile_error is not None
    for shape in result.shapes:
        if shape.failed:
            if shown_compile and shape.stage == "compile":
                continue
            lines += shape_failure(shape, user_file, source)
    return lines
