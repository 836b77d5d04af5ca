"""No oracle: a benchmark-mode server answers a guessed hidden figure or provenance string exactly
as it answers any other value (as an op name, a wiki query, a path, a shape id, a doc id, a
hardware name, or printed by a candidate), and `roofline_lookup` of the caller's own counts is a
pure function of those counts and the public hardware profile, whichever traffic hypothesis
they encode. Policy views show no incident that compares with hidden values."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from atrex_mcp.evaluate.models import DeviceInfo, EvalResult, Isolation, ShapeResult
from atrex_mcp.paths import REPO_ROOT, problems_dir
from atrex_mcp.policy import Policy
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.problemset.hardware import load_profile
from atrex_mcp.problemset.roofline import (
    Workload,
    arithmetic_intensity,
    bound,
    compute_seconds,
    memory_seconds,
    t_sol_ms,
)
from tests.server_fixtures import config, connect, result_text

pytestmark = pytest.mark.anyio
OP = "rms_norm"
HIDDEN = Catalog().hidden(OP)
PRODUCTION = HIDDEN.metadata["shapes"]["14"]["production_us"]["XPU-A"]
T_SOL = HIDDEN.roofline["shapes"]["14"]["t_sol_ms"]["h200"]
STRINGS = [HIDDEN.metadata["production_note"], HIDDEN.metadata["shapes"]["14"]["description"]]


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _guesses(value: float, count: int) -> list[str]:
    """`count` guesses around a hidden value, the value itself (in several notations) among them."""
    exact = [repr(value), f"{value:.4g}", f"{value:.3e}", f"{value * 1000:.6g}"]
    around = [f"{value * (1 + k / 4000):.6g}" for k in range(-(count // 2), count - count // 2) if k]
    return (exact + around)[:count]


def _normalised(text: str, guess: str) -> str:
    return text.replace(guess, "<guess>")


async def _answers(client, tool: str, args_for, guesses: list[str]) -> set[str]:
    seen = set()
    for guess in guesses:
        result = await client.call_tool(tool, args_for(guess))
        seen.add(_normalised(result_text(result), guess))
    return seen


@pytest.fixture
def decoy(tmp_path):
    """A problem root with the same visible files and different hidden ones: every float of the
    hidden files scaled, every string changed. A server's answers may depend on the caller's text
    and the public files, never on the hidden values, so both roots must answer alike."""
    roots = {}
    for name, scale in (("real", 1.0), ("decoy", 1.37)):
        root = tmp_path / name
        shutil.copytree(problems_dir() / OP, root / OP)
        for hidden in ("metadata.json", "roofline.json"):
            data = json.loads((root / OP / hidden).read_text())
            (root / OP / hidden).write_text(json.dumps(_perturbed(data, scale)))
        shutil.copy(problems_dir() / "weights.json", root / "weights.json")
        roots[name] = root
    return roots


def _perturbed(node, scale: float):
    if scale == 1.0:
        return node
    if isinstance(node, dict):
        return {k: _perturbed(v, scale) for k, v in node.items()}
    if isinstance(node, list):
        return [_perturbed(v, scale) for v in node]
    if isinstance(node, float):
        return node * scale
    if isinstance(node, str) and len(node) >= 16:
        return node[::-1]
    return node


@pytest.mark.slow
async def test_1600_guessed_figures_as_op_names_and_wiki_queries_get_the_same_answers(tmp_path, decoy):
    guesses = _guesses(PRODUCTION, 800) + _guesses(T_SOL, 800)
    assert len(guesses) == 1600 and repr(PRODUCTION) in guesses and repr(T_SOL) in guesses
    (tmp_path / "b").mkdir()
    async with (
        connect(config(tmp_path, "benchmark", problems=[decoy["real"]])) as real,
        connect(config(tmp_path / "b", "benchmark", problems=[decoy["decoy"]])) as other,
    ):
        assert len(await _answers(real, "get_problem", lambda g: {"op": g}, guesses)) == 1
        for guess in guesses:
            answer = await real.call_tool("wiki_search", {"query": guess})
            assert _hits(answer) == _hits(await other.call_tool("wiki_search", {"query": guess})), guess
            assert "withheld" not in result_text(answer) and "redacted" not in result_text(answer)


def _hits(result) -> list:
    """A search answer without its snippets (whoosh picks among equally good passages in no
    fixed order; the passages are public text either way)."""
    assert not result.is_error
    return [{k: v for k, v in hit.items() if k != "snippet"} for hit in result.structured_content["hits"]]


@pytest.mark.parametrize(
    "tool, args_for",
    [
        ("validate", lambda g: {"op": OP, "path": g}),
        ("validate", lambda g: {"op": OP, "source": "x", "shapes": [g]}),
        ("wiki_read", lambda g: {"doc_id": g}),
        ("roofline_lookup", lambda g: {"hardware": g}),
        ("run_state", lambda g: {"run_id": g}),
        ("package", lambda g: {"op": OP, "source": "x", "out_dir": g}),
    ],
)
async def test_hidden_figures_and_provenance_in_any_argument_get_the_same_answer(tmp_path, tool, args_for):
    guesses = _guesses(PRODUCTION, 30) + _guesses(T_SOL, 30)
    async with connect(config(tmp_path, "benchmark")) as client:
        figures = await _answers(client, tool, args_for, guesses)
        strings = await _answers(
            client,
            tool,
            args_for,
            [s[:60] for s in STRINGS] + ["x" * 60, "an honest text of sixty characters or so, nothing hidden"],
        )
    assert len(figures) == 1 and len(strings) == 1, (figures, strings)


async def test_a_provenance_string_as_op_name_or_query_gets_the_ordinary_answer(tmp_path):
    async with connect(config(tmp_path, "benchmark")) as client:
        for text in STRINGS:
            hidden = await client.call_tool("get_problem", {"op": text[:128]})
            other = await client.call_tool("get_problem", {"op": "z" * min(len(text), 128)})
            assert result_text(hidden).replace(text[:128], "<guess>") == result_text(other).replace(
                "z" * min(len(text), 128), "<guess>"
            )
            found = await client.call_tool("wiki_search", {"query": text[:500]})
            assert not found.is_error and "withheld" not in result_text(found)


def _expected(flops: int, bytes_read: int, bytes_written: int) -> dict:
    profile = load_profile("h200")
    workload = Workload(flops={"bf16": flops}, bytes_read=bytes_read, bytes_written=bytes_written)
    return {
        "t_sol_ms": t_sol_ms(workload, profile),
        "compute_ms": 1000.0 * compute_seconds(workload, profile),
        "memory_ms": 1000.0 * memory_seconds(workload, profile),
        "bound": bound(workload, profile),
        "arithmetic_intensity": arithmetic_intensity(workload),
        "bytes": float(bytes_read + bytes_written),
    }


async def test_roofline_lookup_of_traffic_hypotheses_is_a_pure_calculator(tmp_path, monkeypatch):
    """The hidden hypothesis and its neighbours get answers computed from the arguments and the
    public profile alone; the hidden files are not even opened."""
    stored = HIDDEN.roofline["shapes"]["14"]
    flops, read, written = (
        int(stored["flops"].get("bf16", 0) or 0),
        int(stored["bytes_read"]),
        int(stored["bytes_written"]),
    )
    hypotheses = [(flops, read + delta, written) for delta in (-4096, -2048, 0, 2048, 4096)] + [
        (flops, read, written * 2)
    ]
    monkeypatch.setattr(Catalog, "hidden", lambda self, op: pytest.fail("roofline_lookup read the hidden files"))
    async with connect(config(tmp_path, "benchmark")) as client:
        for f, r, w in hypotheses:
            result = await client.call_tool(
                "roofline_lookup", {"flops": f, "dtype_path": "bf16", "bytes_read": r, "bytes_written": w}
            )
            got = result.structured_content
            assert not result.is_error and got["notes"] == [] and got["problem"] is None
            assert {k: got[k] for k in _expected(f, r, w)} == _expected(f, r, w)


async def test_a_candidate_printing_a_guess_gets_the_same_answer_as_for_any_number(tmp_path):
    """The worker's text is masked without looking at hidden values: a kernel that raises the
    hidden T_SOL and one that raises another number read the same verdict."""
    kernel = (REPO_ROOT / "examples" / "rms_norm_triton.py").read_text()
    answers = set()
    async with connect(config(tmp_path, "benchmark")) as client:
        for guess in (repr(T_SOL), repr(T_SOL * 1.37)):
            source = kernel + f"\nraise ValueError('t_sol is {guess} ms')\n"
            result = await client.call_tool("validate", {"op": OP, "source": source, "shapes": ["smoke"], "seeds": 1})
            data = result.structured_content
            scratch = re.sub(
                r"atrex-eval-\w+", "<scratch>", data["compile_error"]["message"]
            )  # a fresh folder each time
            answers.add((scratch, tuple(data["integrity"])))
    assert len(answers) == 1
    message, integrity = answers.pop()
    assert "t_sol is <num> ms" in message and integrity == ()


def _eval_result(incidents: list[str]) -> EvalResult:
    shape = ShapeResult(
        id="0",
        correct=True,
        stage=None,
        category=None,
        message="",
        time_ms=0.001,
        t_sol_ms=T_SOL,
        score=T_SOL / 0.001,
        integrity=list(incidents),
    )
    return EvalResult(
        op=OP,
        candidate="candidate",
        candidate_sha256="0" * 64,
        dsl="triton",
        hardware="h200",
        compiled=True,
        shapes=[shape],
        device=DeviceInfo(kind="cuda", name="H200"),
        isolation=Isolation(),
        integrity=list(incidents),
        started_at="2026-01-01T00:00:00+00:00",
    )


def test_views_show_no_incident_that_compares_with_hidden_values():
    incidents = ["faster_than_sol", "hidden_data_leak", "side_stream_work"]
    benchmark = Policy("benchmark", Catalog()).validate_view(_eval_result(incidents))
    assert benchmark.integrity == ["side_stream_work"] and benchmark.shapes[0].integrity == ["side_stream_work"]
    assert benchmark.shapes[0].category is None and benchmark.shapes[0].score is None
    assert benchmark == Policy("benchmark", Catalog()).validate_view(_eval_result(["side_stream_work"]))
    optimize = Policy("optimize", Catalog()).validate_view(_eval_result(incidents))
    assert optimize.integrity == ["faster_than_sol", "side_stream_work"]
