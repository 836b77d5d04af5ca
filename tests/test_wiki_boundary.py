"""The wiki is served in benchmark mode, so nothing in it may carry evaluator-only data: the
production timings, the per-shape speed-of-light figures, the importance weights, or the
provenance text of the operator set. The hidden figures come from the shared operator data
(../shared/atrex-ops) when present, else from the problems' hidden files."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WIKI = ROOT / "gpu_wiki"
SHARED = ROOT.parent / "shared" / "atrex-ops"
PROBLEMS = ROOT / "problems"
# A decimal literal, and whether a time unit follows it.
NUMBER = re.compile(r"(?<![\w.])(\d+\.\d+)(?![\w.])(\s?(?:µs|us|ms)\b)?")


# Four significant digits identify a figure; three only when written as a time ("9.95 µs"):
# bare three-digit values such as 4.26 (TB/s) or 2.11 (a version) recur by chance.
def _identifying(literal: str, timed: bool) -> bool:
    significant = len(literal.replace(".", "").lstrip("0"))
    return significant >= 4 or (significant == 3 and timed)


def _hidden_numbers() -> list[float]:
    numbers: list[float] = []
    if (SHARED / "shapes").is_dir():
        for path in (SHARED / "shapes").glob("*.json"):
            data = json.loads(path.read_text())
            numbers += [v for s in data["shapes"] for v in s.get("production_us", {}).values() if v is not None]
            numbers.append(data["weight"])
    for path in PROBLEMS.glob("*/metadata.json"):
        data = json.loads(path.read_text())
        numbers += [v for s in data["shapes"].values() for v in s.get("production_us", {}).values() if v is not None]
    for path in PROBLEMS.glob("*/roofline.json"):
        for shape in json.loads(path.read_text())["shapes"].values():
            for ms in shape.get("t_sol_ms", {}).values():
                numbers += [ms, ms * 1000.0]  # written in ms or in µs
    if (PROBLEMS / "weights.json").is_file():
        data = json.loads((PROBLEMS / "weights.json").read_text())
        numbers += list(data.get("raw", {}).values()) + list(data.get("weights", {}).values())
    return numbers


def _hidden_strings() -> list[str]:
    texts = {"XPU-A", "production_us", "production_note"}
    metadata = [json.loads(p.read_text()) for p in PROBLEMS.glob("*/metadata.json")]
    if (SHARED / "shapes").is_dir():
        metadata += [json.loads(p.read_text()) for p in (SHARED / "shapes").glob("*.json")]
    for data in metadata:
        if data.get("production_note"):
            texts.add(data["production_note"][:60])
        shapes = data["shapes"].values() if isinstance(data["shapes"], dict) else data["shapes"]
        for shape in shapes:
            for key in ("description", "note"):
                if shape.get(key):
                    texts.add(shape[key])
    return sorted(texts)


@pytest.fixture(scope="module")
def hidden():
    numbers = _hidden_numbers()
    if not numbers:
        pytest.skip("no hidden operator data available to check against")
    by_decimals = {d: {f"{v:.{d}f}" for v in numbers} for d in range(1, 10)}
    return by_decimals, [s.lower() for s in _hidden_strings()]


def _wiki_files() -> list[Path]:
    return sorted(p for p in WIKI.rglob("*") if p.is_file() and p.suffix in {".md", ".py", ".json"})


def _leaks(text: str, hidden) -> list[str]:
    by_decimals, strings = hidden
    numbers = [
        m
        for m, unit in NUMBER.findall(text)
        if _identifying(m, bool(unit)) and m in by_decimals.get(len(m.split(".")[1]), ())
    ]
    lowered = text.lower()
    return numbers + [s for s in strings if s in lowered]


def test_the_check_catches_hidden_figures(hidden):
    production = next(v for v in _hidden_numbers() if v >= 1 and round(v, 2) == v)
    assert _leaks(f"the deployed kernel took {production:.2f} µs", hidden)
    assert _leaks("measured on XPU-A", hidden)
    assert not _leaks("HBM copy reaches 4.26 TB/s; PyTorch 2.11", hidden)


@pytest.mark.parametrize("path", _wiki_files(), ids=lambda p: str(p.relative_to(WIKI)))
def test_no_evaluator_only_data(path, hidden):
    leaked = _leaks(path.read_text(), hidden)
    assert not leaked, f"{path.name} carries evaluator-only figures or provenance: {leaked}"
