"""Stamping measured GPU figures into a kernel's front matter: the table is replaced, the file
stays parseable, re-stamping is idempotent, no per-shape score is written, and the operator
score S is written only for a run over every scored shape — a subset is stamped as a subset. A bench eval
run stamps a kernel only when the judged submission is that wiki kernel."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from atrex_mcp.agentbench.evaluation import StoredSettings
from atrex_mcp.agentbench.layout import RunLayout
from atrex_mcp.agentbench.models import AgentSpec, OpState, RunConfig, Submission
from atrex_mcp.agentbench.models import Isolation as RunIsolation
from atrex_mcp.agentbench.wiki_stamp import main as stamp_run
from atrex_mcp.evaluate.models import DeviceInfo, EvalResult, ShapeResult
from atrex_mcp.evaluate.models import Isolation as EvalIsolation
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.wiki.corpus import kernel_front_matter
from atrex_mcp.wiki.stamp import main

KERNEL = Path(__file__).resolve().parent.parent / "gpu_wiki" / "kernels" / "rms_norm.py"


@pytest.fixture(scope="module")
def scored_ids() -> list[str]:
    return [s.id for s in Catalog().visible("rms_norm").scored_shapes]


def _shape(shape_id: str, correct: bool, time_ms: float | None) -> dict:
    # "score" stands for anything per-shape the stamp must not copy
    return {
        "id": shape_id,
        "correct": correct,
        "time_ms": time_ms,
        "score": 0.9876 if correct else None,
        "category": None if correct else "numeric_mismatch",
        "stage": None if correct else "correctness",
    }


def _write_report(tmp_path: Path, shapes: list[dict], shapes_meta: str) -> Path:
    correct = [s for s in shapes if s["correct"]]
    report = {
        "meta": {
            "date": "2026-12-01",
            "gpu": "NVIDIA H200",
            "versions": {"torch": "2.11.0", "triton": "3.6.0"},
            "shapes": shapes_meta,
        },
        "kernels": {
            "rms_norm": {
                "operator": "rms_norm",
                "shapes": shapes,
                "shapes_correct": len(correct),
                "shapes_total": len(shapes),
                "operator_score": 0.6123,
                "median_time_ms": 0.756,
                "median_dsl_share": 1.0,
            },
            "broken": {"error": "Traceback ..."},
        },
    }
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    return path


def _kernels(tmp_path: Path) -> Path:
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    shutil.copy(KERNEL, kernels / "rms_norm.py")
    return kernels


def test_full_run_is_stamped_with_the_operator_score(tmp_path, scored_ids):
    shapes = [_shape(i, i != "1", None if i == "1" else 0.0123456 * (1 + int(i))) for i in scored_ids]
    report, kernels = _write_report(tmp_path, shapes, "all scored"), _kernels(tmp_path)
    assert main([str(report), "--kernels", str(kernels)]) == 0
    text = (kernels / "rms_norm.py").read_text()
    meta, _ = kernel_front_matter(text, "rms_norm.py")
    h200 = meta["h200"]
    assert h200["status"] == "measured" and h200["date"] == "2026-12-01" and h200["operator_score"] == 0.612
    assert h200["time_ms"]["0"] == 0.0123 and "1" not in h200["time_ms"]
    assert h200["failures"] == {"1": "numeric_mismatch"} and h200["shapes_scored"] == len(scored_ids)
    assert "score" not in json.dumps(h200["time_ms"]) and "0.988" not in text.split("+++")[1].split("[h200]")[1]
    correct = len(scored_ids) - 1
    assert (
        meta["validated_shapes"][1]
        == f"NVIDIA H200 2026-12-01: {correct}/{len(scored_ids)} scored shapes correct (failed: 1)"
    )
    assert main([str(report), "--kernels", str(kernels)]) == 0
    assert (kernels / "rms_norm.py").read_text() == text
    compile(text, "rms_norm.py", "exec")


def test_subset_run_is_stamped_without_the_operator_score(tmp_path, scored_ids):
    report = _write_report(tmp_path, [_shape("0", True, 0.00691)], "0")
    kernels = _kernels(tmp_path)
    assert main([str(report), "--kernels", str(kernels)]) == 0
    meta, _ = kernel_front_matter((kernels / "rms_norm.py").read_text(), "rms_norm.py")
    h200 = meta["h200"]
    assert h200["status"] == "measured on a subset of shapes" and "operator_score" not in h200
    assert h200["operator_score_pending"] == "S over the full shape set: pending; measured on shapes [0]"
    assert h200["shapes_measured"] == ["0"] and h200["time_ms"] == {"0": 0.00691} and h200["failures"] == {}
    assert (
        meta["validated_shapes"][1]
        == f"NVIDIA H200 2026-12-01: measured on shapes [0] of {len(scored_ids)} scored; 1 correct"
    )


@pytest.mark.parametrize("case", ["smoke run", "claims every shape but lacks some"])
def test_misleading_reports_are_refused_and_nothing_is_stamped(tmp_path, case):
    if case == "smoke run":
        report = _write_report(tmp_path, [_shape("smoke", True, 0.01)], "smoke")
    else:
        report = _write_report(tmp_path, [_shape("0", True, 0.01), _shape("1", True, 0.02)], "all scored")
    kernels = _kernels(tmp_path)
    assert main([str(report), "--kernels", str(kernels)]) == 2
    assert (kernels / "rms_norm.py").read_text() == KERNEL.read_text()


# A bench eval run directory: the wiki kernels judged as one candidate set.

KERNELS = KERNEL.parent
RUN_OPS = ["rms_norm", "l2_norm", "silu_and_mul"]


def _eval_result(op: str, source: str, ids: list[str], *, partial: str | None = None, device: str = "NVIDIA H200"):
    shapes = [
        ShapeResult(
            id=i,
            correct=True,
            time_ms=0.01 * (n + 1),
            dsl_share=1.0,
            score=0.9876,
            t_sol_ms=0.004321,
            seeds=[1, 2, 3, 4, 5],
        )
        for n, i in enumerate(ids)
    ]
    if partial:  # the last shape was never started
        shapes[-1] = ShapeResult(id=ids[-1], correct=False, stage="not_run", category="not_run_deadline")
    return EvalResult(
        op=op,
        candidate="candidate",
        candidate_sha256=hashlib.sha256(source.encode()).hexdigest(),
        dsl="triton",
        hardware="h200",
        compiled=True,
        shapes=shapes,
        partial=partial,
        operator_score=0.5432,
        device=DeviceInfo(kind="cuda", name=device, versions={"torch": "2.11.0", "triton": "3.6.0"}),
        isolation=EvalIsolation(),
        started_at="2026-12-02T02:46:37+00:00",
    )


def _run(tmp_path: Path, shapes: str, results: dict[str, EvalResult], sources: dict[str, str]) -> Path:
    """A run over RUN_OPS whose submissions are `sources` and whose eval/ holds `results`."""
    root = tmp_path / "run"
    layout = RunLayout(root)
    config = RunConfig(
        name="wiki-set",
        agent=AgentSpec(kind="command", command=["true"]),
        ops=RUN_OPS,
        dsl="triton",
        condition="vanilla",
        budget_s=60,
        problems=[str(Catalog().roots[0])],
        hardware="h200",
        server="stdio",
        isolation=RunIsolation(agent_uid=0, agent_gid=0, server_uid=0, transport="stdio"),
        created_at="2026-12-02T02:09:23+00:00",
        atrex_mcp_version="0.1.0",
    )
    layout.eval_dir.mkdir(parents=True)
    layout.run_file.write_text(config.model_dump_json())
    settings = StoredSettings(shapes=shapes, seeds=5, timeout_s=120, hardware="h200", dsl="triton", baselines=False)
    (layout.eval_dir / "settings.json").write_text(settings.model_dump_json())
    for op, source in sources.items():
        layout.submission_dir(op).mkdir(parents=True)
        (layout.submission_dir(op) / f"{op}.py").write_text(source)
        artifact = f"ops/{op}/submission/{op}.py"
        sha = hashlib.sha256(source.encode()).hexdigest()
        state = OpState(op=op, status="done", submission=Submission(outcome="submitted", artifact=artifact, sha256=sha))
        layout.state_file(op).write_text(state.model_dump_json())
    for op, result in results.items():
        (layout.eval_dir / f"{op}.json").write_text(result.model_dump_json())
    return root


def _run_kernels(tmp_path: Path) -> Path:
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    for op in RUN_OPS:
        shutil.copy(KERNELS / f"{op}.py", kernels / f"{op}.py")
    return kernels


def _scored(op: str) -> list[str]:
    return [s.id for s in Catalog().visible(op).scored_shapes]


def test_run_stamps_the_judged_wiki_kernels_and_refuses_another_submission(tmp_path, capsys):
    kernels = _run_kernels(tmp_path)
    sources = {op: (KERNELS / f"{op}.py").read_text() for op in RUN_OPS}
    sources["silu_and_mul"] += "\n# changed after the wiki\n"
    rms_ids = _scored("rms_norm")
    results = {op: _eval_result(op, src, _scored(op)) for op, src in sources.items()}
    results["l2_norm"] = _eval_result("l2_norm", sources["l2_norm"], _scored("l2_norm"), partial="deadline")
    run = _run(tmp_path, "all", results, sources)
    assert stamp_run([str(run), "--kernels", str(kernels)]) == 1
    out = capsys.readouterr().out
    assert "stamped 2 kernels: rms_norm, l2_norm" in out
    assert "refused silu_and_mul: the judged submission (sha256" in out and "is not the wiki kernel" in out
    assert (kernels / "silu_and_mul.py").read_text() == (KERNELS / "silu_and_mul.py").read_text()

    text = (kernels / "rms_norm.py").read_text()
    meta, _ = kernel_front_matter(text, "rms_norm.py")
    h200 = meta["h200"]
    assert h200["status"] == "measured" and h200["operator_score"] == 0.543 and h200["seeds"] == 5
    assert h200["date"] == "2026-12-02" and h200["torch"] == "2.11.0" and h200["shapes_measured"] == rms_ids
    assert h200["source"].startswith("bench eval of run 'wiki-set': the full wiki kernel set (3 operators)")
    assert "5 seeds per shape" in h200["source"] and h200["time_ms"]["0"] == 0.01
    assert "0.988" not in text and "0.00432" not in text  # no per-shape S, no speed-of-light time
    assert meta["validated_shapes"][1] == (
        f"NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: {len(rms_ids)}/{len(rms_ids)} scored shapes correct"
    )

    l2 = kernel_front_matter((kernels / "l2_norm.py").read_text(), "l2_norm.py")[0]
    l2_ids = _scored("l2_norm")
    assert l2["h200"]["status"] == "measured on a subset of shapes" and "operator_score" not in l2["h200"]
    assert l2["h200"]["shapes_measured"] == l2_ids[:-1]
    assert l2["validated_shapes"][1].startswith("NVIDIA H200 2026-12-02, full-set bench eval, 5 seeds: measured on")

    # the stamped kernels are still the judged submissions: stamping again changes nothing
    assert stamp_run([str(run), "--kernels", str(kernels), "--ops", "rms_norm,l2_norm"]) == 0
    assert (kernels / "rms_norm.py").read_text() == text


def test_run_over_a_subset_is_stamped_as_a_subset(tmp_path):
    kernels = _run_kernels(tmp_path)
    source = (KERNELS / "rms_norm.py").read_text()
    run = _run(tmp_path, "0,1", {"rms_norm": _eval_result("rms_norm", source, ["0", "1"])}, {"rms_norm": source})
    assert stamp_run([str(run), "--kernels", str(kernels)]) == 0
    meta, _ = kernel_front_matter((kernels / "rms_norm.py").read_text(), "rms_norm.py")
    h200 = meta["h200"]
    assert h200["status"] == "measured on a subset of shapes" and "operator_score" not in h200
    assert h200["operator_score_pending"] == "S over the full shape set: pending; measured on shapes [0, 1]"
    assert "shapes '0,1'" in h200["source"] and h200["seeds"] == 5


@pytest.mark.parametrize("case", ["judged on another GPU", "result of another file", "claims every shape"])
def test_run_refusals_leave_the_kernel_untouched(tmp_path, case, capsys):
    kernels = _run_kernels(tmp_path)
    source = (KERNELS / "rms_norm.py").read_text()
    ids = _scored("rms_norm")
    result = _eval_result("rms_norm", source, ids, device="NVIDIA H100 80GB HBM3" if "GPU" in case else "NVIDIA H200")
    if case == "result of another file":
        result.candidate_sha256 = "0" * 64
    if case == "claims every shape":
        result.shapes = result.shapes[:2]
    run = _run(tmp_path, "all", {"rms_norm": result}, {"rms_norm": source})
    rc = stamp_run([str(run), "--kernels", str(kernels)])
    captured = capsys.readouterr()
    assert (kernels / "rms_norm.py").read_text() == source
    if case == "claims every shape":
        assert rc == 2 and "claims every scored shape but lacks" in captured.err
    else:
        assert rc == 1
        why = "not an H200" if "GPU" in case else "not the collected submission"
        assert "refused rms_norm: " in captured.out and why in captured.out


def test_a_directory_that_is_not_a_run_is_a_one_line_error(tmp_path, capsys):
    assert stamp_run([str(tmp_path), "--kernels", str(_run_kernels(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: [input/not_a_run]") and err.count("\n") == 1


def test_the_report_stamp_sends_a_run_directory_to_the_run_stamp(tmp_path, capsys):
    """The wiki room reads reports only; a run directory is agentbench's to read (one line says which command)."""
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "atrex_mcp.agentbench.wiki_stamp" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
