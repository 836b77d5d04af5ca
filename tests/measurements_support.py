"""Shared by the measurement-script tests: EvalResults built by hand (times and per-stage seconds
chosen by the test), and where the scripts live."""

from __future__ import annotations

from pathlib import Path

from atrex_mcp.evaluate.models import DeviceInfo, EvalResult, Isolation, Overhead, ShapeResult

MEASUREMENTS = Path(__file__).resolve().parent.parent / "measurements"


def shape(
    sid: str,
    time_ms: float | None = None,
    correct: bool = True,
    seconds: dict[str, float] | None = None,
    score: float | None = None,
) -> ShapeResult:
    return ShapeResult(
        id=sid,
        correct=correct,
        time_ms=time_ms,
        score=score,
        seconds=seconds or {},
        stage=None if correct else "correctness",
        category=None if correct else "numeric_mismatch",
    )


def result(
    op: str,
    shapes: list[ShapeResult],
    candidate: str = "eager",
    overhead: Overhead | None = None,
    started_at: str = "2026-01-01T00:00:00+00:00",
    device: str = "NVIDIA H200",
) -> EvalResult:
    return EvalResult(
        op=op,
        candidate=candidate,
        candidate_sha256="0" * 64,
        dsl="triton",
        hardware="h200",
        compiled=True,
        shapes=shapes,
        device=DeviceInfo(kind="cuda", name=device),
        isolation=Isolation(),
        overhead=overhead or Overhead(),
        started_at=started_at,
    )


def write_run(directory: Path, results: list[EvalResult]) -> Path:
    """A run directory as baselines.py writes it: one <op>.<candidate>.json per result."""
    directory.mkdir(parents=True, exist_ok=True)
    for r in results:
        (directory / f"{r.op}.{r.candidate}.json").write_text(r.model_dump_json())
    return directory
