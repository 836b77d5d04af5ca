"""The command line as a script or CI job uses it: exit codes, one-line errors, failure reports a
user can act on, safe defaults with progress, one grammar, and bring-your-own-problem."""

from __future__ import annotations

import fcntl
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import atrex_mcp.evaluate
from atrex_mcp.cli import main
from atrex_mcp.commands.eval import shape_selection
from atrex_mcp.commands.failure_text import traceback_tail, user_names
from atrex_mcp.evaluate.models import DeviceInfo, EvalRequest, EvalResult, Isolation, MismatchDetail, ShapeResult
from atrex_mcp.progress import ShapeProgress

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "rms_norm_triton.py"
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU default")

SYNTAX_ERROR = "import torch\n\nclass Model(torch.nn.Module:\n    pass\n"
RAISES = """import torch
from torch import nn


def helper(x):
    raise ValueError("boom from helper")


class Model(nn.Module):
    def __init__(self, *, eps: float = 1e-6):
        super().__init__()

    def forward(self, x, weight):
        return helper(x)
"""
WRONG = """import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, *, eps: float = 1e-6):
        super().__init__()

    def forward(self, x, weight):
        return (x * 2).to(x.dtype)
"""


def error_line(capsys) -> str:
    """The one `error:` line of stderr (and no traceback)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def eval_file(tmp_path: Path, name: str, text: str, capsys, *extra: str) -> tuple[int, str, Path]:
    path = tmp_path / name
    path.write_text(text)
    code = main(["eval", str(path), "--op", "rms_norm", "--shapes", "smoke", "--seeds", "1", "--plain", *extra])
    return code, capsys.readouterr().out, path


def canned(shapes: list[ShapeResult]) -> EvalResult:
    return EvalResult(
        op="rms_norm",
        candidate="candidate",
        candidate_sha256="0" * 64,
        dsl="triton",
        hardware="h200",
        compiled=True,
        shapes=shapes,
        device=DeviceInfo(kind="cpu", name="cpu"),
        isolation=Isolation(),
        started_at="2026-01-01T00:00:00+00:00",
    )


@pytest.fixture
def fake_evaluate(monkeypatch):
    """`eval` through the CLI with the evaluator replaced: reports progress per shape and returns `results`."""
    state = {"shapes": None, "fail": set(), "requests": []}

    def fake(request, catalog, progress=None, **_):
        state["requests"].append(request)
        ids = request.shapes or [s.id for s in catalog.visible(request.op).scored_shapes]
        for i, shape_id in enumerate(ids):
            if progress:
                progress(f"shape {shape_id}", (i + 0.5) / len(ids))
        if progress:
            progress("done", 1.0)
        return canned(
            [
                ShapeResult(
                    id=i,
                    correct=i not in state["fail"],
                    stage="correctness" if i in state["fail"] else None,
                    category="numeric_mismatch" if i in state["fail"] else None,
                    message="seed #0: off" if i in state["fail"] else "",
                )
                for i in ids
            ]
        )

    monkeypatch.setattr(atrex_mcp.evaluate, "evaluate", fake, raising=False)
    return state


# ------------------------------------------------------------------ exit codes and failure reports
def test_a_syntax_error_names_the_users_file_and_line_and_exits_1(tmp_path, capsys):
    code, out, path = eval_file(tmp_path, "my_kernel.py", SYNTAX_ERROR, capsys)
    assert code == 1
    assert "FAILED compile: compile/syntax_error" in out and f"({path}, line 3)" in out
    assert "    3 | class Model(torch.nn.Module:" in out and "candidate.py" not in out


def test_a_runtime_error_shows_the_traceback_tail_in_the_users_file_and_exits_1(tmp_path, capsys):
    code, out, path = eval_file(tmp_path, "raising.py", RAISES, capsys)
    assert code == 1
    assert "FAILED shape smoke: runtime/exception" in out
    assert f'File "{path}", line 14, in forward' in out and f'File "{path}", line 6, in helper' in out
    assert "ValueError: boom from helper" in out and "candidate.py" not in out and "sandbox/worker.py" not in out


def test_a_wrong_result_shows_the_mismatch_figures_and_exits_1(tmp_path, capsys):
    code, out, _ = eval_file(tmp_path, "wrong.py", WRONG, capsys)
    assert code == 1
    assert "FAILED shape smoke: correctness/numeric_mismatch (seed #0)" in out
    assert "max abs error" in out and "max rel error" in out and "mismatched (" in out and "first bad index [" in out


@no_gpu
def test_a_correct_kernel_exits_0_and_without_a_gpu_only_the_smoke_shape_is_judged(capsys):
    code = main(["eval", str(EXAMPLE), "--op", "rms_norm", "--seeds", "1", "--plain"])
    captured = capsys.readouterr()
    assert code == 0 and "1 passed, 0 failed" in captured.out
    assert "note: no GPU: judging only the smoke shape (smoke), for correctness" in captured.err
    assert "[1/1] shape smoke" in captured.err


def test_traceback_tail_starts_at_the_users_first_frame():
    text = (
        "builtins.KeyError: 1\nTraceback (most recent call last):\n"
        '  File "/x/sandbox/worker.py", line 325, in serve\n    reply = handler(msg)\n'
        '  File "/tmp/atrex-eval-ab/candidate.py", line 9, in forward\n    return table[1]\n           ~~~~~^^^\n'
        "KeyError: 1\n"
    )
    assert traceback_tail(text, "k.py") == ['  File "k.py", line 9, in forward', "    return table[1]", "KeyError: 1"]
    shown = user_names("SyntaxError: bad (candidate.py, line 2)", "/home/u/k.py")
    assert shown == "SyntaxError: bad (/home/u/k.py, line 2)"
    assert user_names("my_candidate.py stays", "k.py") == "my_candidate.py stays"


def test_eval_exit_code_follows_the_judged_shapes(fake_evaluate, capsys):
    assert main(["eval", str(EXAMPLE), "--op", "rms_norm", "--shapes", "0,1", "--plain"]) == 0
    fake_evaluate["fail"] = {"1"}
    assert main(["eval", str(EXAMPLE), "--op", "rms_norm", "--shapes", "0,1", "--plain"]) == 1
    out = capsys.readouterr().out
    assert "FAILED shape 1: correctness/numeric_mismatch" in out and out.rstrip().endswith("1 passed, 1 failed")


def test_mismatch_line_has_the_pytest_figures():
    from atrex_mcp.commands.failure_text import mismatch_line

    m = MismatchDetail(
        output="out",
        rule="allclose",
        atol=0.01,
        rtol=0.05,
        max_abs_error=4.4,
        max_rel_error=0.96,
        mismatch_fraction=0.5,
        mismatches=2,
        numel=4,
        first_bad_index=[0, 1],
        reference_value=1.0,
        candidate_value=2.0,
    )
    assert mismatch_line(m) == (
        "out [allclose (atol 0.01, rtol 0.05)]: max abs error 4.4, max rel error 0.96, "
        "2/4 mismatched (50.00%); first bad index [0, 1]: got 2, expected 1"
    )


def test_problems_check_exits_1_for_a_problem_that_accepts_trivial_candidates(tmp_path, capsys):
    assert main(["problems", "init", "flat", "--dir", str(tmp_path)]) == 0
    reference = tmp_path / "flat" / "reference.py"
    reference.write_text(
        reference.read_text().replace(
            "return (xf * torch.sigmoid(xf) * self.scale).to(x.dtype)", "return torch.zeros_like(x)"
        )
    )
    assert main(["problems", "check", "flat", "--problems", str(tmp_path)]) == 1
    assert "FAIL flat" in capsys.readouterr().out


# ------------------------------------------------------------------ safe defaults and progress
def test_shape_ids_are_judged_once_in_the_order_given():
    assert shape_selection("3,1,3,1,2", "smoke", has_gpu=True) == (["3", "1", "2"], "")
    assert shape_selection(None, "smoke", has_gpu=True) == (None, "")
    ids, note = shape_selection(None, "s", has_gpu=False)
    assert ids == ["s"] and note.startswith("no GPU: judging only the smoke shape (s)")
    assert EvalRequest(op="rms_norm", source="x", shapes=["0"] * 20000 + ["1", "0"]).shapes == ["0", "1"]


def test_a_long_evaluation_prints_an_estimate_and_per_shape_progress_with_eta(fake_evaluate, capsys):
    assert main(["eval", str(EXAMPLE), "--op", "rms_norm", "--shapes", "0,2,2,3", "--plain"]) == 0
    err = capsys.readouterr().err
    assert "note: 3 shape(s) x 5 seed(s) on " in err and "(a rough estimate)" in err
    assert "[1/3] shape 0" in err and "[3/3] shape 3" in err and "ETA" in err
    assert fake_evaluate["requests"][-1].shapes == ["0", "2", "3"]


def test_progress_lines_show_elapsed_and_eta_off_a_terminal():
    out = io.StringIO()
    with ShapeProgress(2, estimate_s=90, stream=out) as progress:
        progress("starting the sandbox worker and loading the candidate", 0.0)
        progress("shape a", 0.25)
        progress("shape b", 0.75)
        progress("done", 1.0)
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("(elapsed 0:00, ETA 1:30)")
    assert lines[1].startswith("[1/2] shape a  (elapsed 0:00, ETA") and lines[2].startswith("[2/2] shape b")
    assert lines[3] == "done  (elapsed 0:00)" and "\x1b[" not in out.getvalue()


def test_a_shape_that_cannot_fit_is_refused_with_the_estimate(tmp_path, capsys):
    assert main(["problems", "init", "big_op", "--dir", str(tmp_path)]) == 0
    shapes_file = tmp_path / "big_op" / "shapes.json"
    doc = json.loads(shapes_file.read_text())
    doc["shapes"].append({"id": "huge", "init": {"scale": 1.0}, "inputs": {"tokens": 10**8, "hidden": 2048}})
    shapes_file.write_text(json.dumps(doc))
    capsys.readouterr()
    code = main(["eval", str(EXAMPLE), "--op", "big_op", "--problems", str(tmp_path), "--shapes", "huge"])
    assert code == 2
    line = error_line(capsys)
    assert line.startswith(
        "error: [input/shape_too_large] Shape 'huge' of big_op needs about 762.9 GiB "
        "(2 copies of 381.5 GiB of inputs); "
    )
    assert line.endswith("Hint: Choose smaller shapes (--shapes), or run where there is more memory.")


# ------------------------------------------------------------------ one grammar
def test_options_work_after_the_action_and_the_old_flag_still_does(tmp_path, capsys):
    assert main(["problems", "init", "mine", "--dir", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["problems", "list", "--problems", str(tmp_path), "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["mine"]
    assert main(["problems", "--problems", str(tmp_path), "list", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["mine"]
    assert main(["problems", "list", "--root", str(tmp_path), "--json"]) == 0
    captured = capsys.readouterr()
    assert [r["name"] for r in json.loads(captured.out)] == ["mine"]
    assert captured.err == "warning: --root is deprecated; use --problems\n"
    assert main(["runs", "list", "--state-dir", str(tmp_path / "state")]) == 0
    assert "no runs in" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["evl"],
            "error: atrex-mcp: argument COMMAND: invalid choice 'evl' (did you mean 'eval'?); choose from bench, "
            "config, demo, doctor, eval, problems, roofline, runs, score, serve, trace, wiki (see atrex-mcp --help)",
        ),
        (
            ["problems", "lst"],
            "error: atrex-mcp problems: argument ACTION: invalid choice 'lst' (did you mean 'list'?); "
            "choose from list, show, init, add, build, check (see atrex-mcp problems --help)",
        ),
        (
            ["eval", "--baseline", "eager", "--op", "rms_nrom"],
            "error: [input/unknown_problem] Unknown problem 'rms_nrom' "
            "(did you mean 'rms_norm'?). Hint: Valid choices: ",
        ),
        (
            ["eval", str(EXAMPLE), "--op", "rms_norm", "--shapes", "smok"],
            "error: [input/unknown_shape] Unknown shape 'smok' (did you mean 'smoke'?). Hint: Valid choices: 0, 1,",
        ),
        (
            ["eval", str(EXAMPLE), "--op", "rms_norm", "--seeds", "0"],
            "error: atrex-mcp eval: argument --seeds: must be at least 1 and at most 64, got 0 (see atrex-mcp eval "
            "--help)",
        ),
        (
            ["eval", str(EXAMPLE), "--op", "rms_norm", "--seeds", "-2"],
            "error: atrex-mcp eval: argument --seeds: must be at least 1 and at most 64, got -2 (see atrex-mcp eval "
            "--help)",
        ),
        (
            ["eval", str(EXAMPLE), "--op", "rms_norm", "--timeout", "nan"],
            "error: atrex-mcp eval: argument --timeout: must be a number of seconds above 0, got nan "
            "(see atrex-mcp eval --help)",
        ),
        (
            ["problems", "show"],
            "error: atrex-mcp problems show: the following arguments are required: op "
            "(see atrex-mcp problems show --help)",
        ),
    ],
)
def test_usage_and_input_errors_are_one_line_and_exit_2(argv, expected, capsys):
    assert main(argv) == 2
    assert error_line(capsys).startswith(expected)


def test_binary_and_non_utf8_candidates_are_one_line_errors(tmp_path, capsys):
    binary, latin = tmp_path / "k.so", tmp_path / "latin.py"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00")
    latin.write_bytes(b"x = '\xe9'\n")
    assert main(["eval", str(binary), "--op", "rms_norm"]) == 2
    assert error_line(capsys) == (
        f"error: [input/binary_candidate] {binary} is a binary file, not Python source. "
        "Hint: Pass the .py file that defines class Model."
    )
    assert main(["eval", str(latin), "--op", "rms_norm"]) == 2
    assert error_line(capsys) == (
        f"error: [input/candidate_not_utf8] {latin} is not UTF-8 text (byte 5: invalid "
        "continuation byte). Hint: Save the file as UTF-8."
    )
    assert main(["eval", str(latin), "--op", "rms_norm", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["category"] == "candidate_not_utf8"


def test_interrupt_and_unexpected_errors_end_in_one_line(monkeypatch, capsys):
    import atrex_mcp.commands.problems as problems

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(problems, "_list", interrupted)
    assert main(["problems", "list"]) == 130
    assert error_line(capsys) == "error: interrupted"

    def bug(args):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(problems, "_list", bug)
    assert main(["problems", "list"]) == 3
    assert error_line(capsys) == (
        "error: [internal/ZeroDivisionError] division by zero (set ATREX_DEBUG=1 for the traceback)"
    )


F_SETPIPE_SZ = 1031  # Linux fcntl: set a pipe's capacity


def test_a_closed_pipe_ends_quietly():
    """Like `| head -c 10`. The pipe holds one page, less than the command prints, so the command is
    still writing when the reader goes away, however fast it is."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen(
        [sys.executable, "-m", "atrex_mcp.cli", "problems", "show", "rms_norm"],
        cwd=ROOT,
        stdout=write_end,
        stderr=subprocess.PIPE,
    )
    os.close(write_end)
    os.read(read_end, 10)
    os.close(read_end)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == ""


def test_an_interrupted_bench_eval_with_only_settings_accepts_new_settings(tmp_path, capsys):
    from atrex_mcp.agentbench.runner import RunRequest, open_run

    _, layout = open_run(RunRequest(out=tmp_path / "run", agent="/bin/true", ops="rms_norm", agent_uid="same"))
    argv = ["bench", "eval", str(layout.root), "--plain", "--seeds"]
    assert main([*argv, "1"]) == 0 and (layout.eval_dir / "settings.json").is_file()
    if not torch.cuda.is_available():
        assert "note: no GPU: judging only each operator's smoke shape" in capsys.readouterr().err
        assert json.loads((layout.eval_dir / "settings.json").read_text())["shapes"] == "smoke"
    assert main([*argv, "2"]) == 0  # only settings.json: nothing made with the old settings
    assert json.loads((layout.eval_dir / "settings.json").read_text())["seeds"] == 2
    (layout.eval_dir / "rms_norm.json").write_text("{}")
    capsys.readouterr()
    assert main([*argv, "3"]) == 2
    assert "holds results made with other settings" in error_line(capsys)


# ------------------------------------------------------------------ bring your own problem
def test_init_check_and_eval_a_new_problem(tmp_path, capsys):
    assert main(["problems", "init", "my_op", "--dir", str(tmp_path)]) == 0
    folder = tmp_path / "my_op"
    assert sorted(p.name for p in folder.iterdir()) == ["input.py", "reference.py", "shapes.json"]
    assert main(["problems", "init", "my_op", "--dir", str(tmp_path)]) == 2
    assert "problem_exists" in error_line(capsys)
    assert main(["problems", "check", "--problems", str(tmp_path), "my_op"]) == 0
    assert main(["problems", "add", str(folder), "--weight", "0"]) == 0
    capsys.readouterr()
    assert main(["problems", "list", "--problems", str(tmp_path)]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split() == ["operator", "shapes", "weight", "dtype", "phase"]
    assert listing[1].split() == ["my_op", "3", "0.0000", "bf16", "unknown"]
    candidate = tmp_path / "kernel.py"
    candidate.write_text((folder / "reference.py").read_text())  # the reference itself is a correct candidate
    assert (
        main(
            [
                "eval",
                str(candidate),
                "--op",
                "my_op",
                "--problems",
                str(tmp_path),
                "--shapes",
                "smoke",
                "--seeds",
                "1",
                "--plain",
            ]
        )
        == 0
    )
    assert "1 passed, 0 failed" in capsys.readouterr().out


def test_the_weight_shown_is_the_weight_used(tmp_path, capsys):
    for name, weight in (("one", "0"), ("two", "3"), ("three", "1")):
        main(["problems", "init", name, "--dir", str(tmp_path / "src")])
        assert (
            main(["problems", "add", str(tmp_path / "src" / name), "--into", str(tmp_path / "set"), "--weight", weight])
            == 0
        )
    capsys.readouterr()
    assert main(["problems", "list", "--problems", str(tmp_path / "set"), "--json"]) == 0
    weights = {r["name"]: r["weight"] for r in json.loads(capsys.readouterr().out)}
    assert weights == {"one": 0.0, "two": 0.75, "three": 0.25}


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_benchmark_mode_server_serves_the_new_problem_without_its_hidden_figures(tmp_path, anyio_backend):
    from tests.server_fixtures import config, connect, result_text

    assert main(["problems", "init", "my_op", "--dir", str(tmp_path / "set")]) == 0
    assert main(["problems", "add", str(tmp_path / "set" / "my_op"), "--weight", "0.37"]) == 0
    async with connect(config(tmp_path, mode="benchmark", problems=[tmp_path / "set"])) as client:
        listed = await client.call_tool("list_problems", {})
    assert [p["name"] for p in listed.structured_content["problems"]] == ["my_op"]
    text = result_text(listed)
    assert listed.structured_content["mode"] == "benchmark" and "0.37" not in text and "weight" not in text


def test_a_chained_exception_shows_the_one_that_ended_the_call():
    text = (
        'Traceback (most recent call last):\n  File "/s/candidate.py", line 3, in f\n    d[1]\nKeyError: 1\n\n'
        "During handling of the above exception, another exception occurred:\n\n"
        'Traceback (most recent call last):\n  File "/s/candidate.py", line 5, in forward\n    raise ValueError("x")\n'
        "ValueError: x\n"
    )
    assert traceback_tail(text, "k.py") == [
        '  File "k.py", line 5, in forward',
        '    raise ValueError("x")',
        "ValueError: x",
    ]
