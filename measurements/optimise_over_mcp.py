#!/usr/bin/env python3
"""Does the optimisation loop work through the server's own MCP tools, as an agent drives it?

Starts `atrex-mcp serve` (optimize mode, the full wiki, or --benchmark-mode) as a stdio
subprocess and, for each operator given as a pair of kernel files, performs what an optimising
agent performs: get_problem -> wiki_search -> wiki_read (top hit) -> validate (baseline) ->
profile_kernel (baseline) -> start_run -> submit_baseline -> record_iteration (the candidate,
with a typed plan citing the baseline's profile id and the wiki ids the search returned) ->
profile_kernel (the new accepted kernel, the next plan's evidence) -> run_state -> package_run.
Every call is recorded (tool, arguments with kernel sources reduced to their hash, the full
answer, wall time, error) in OUT/timeline.json and OUT/timeline.md, and each run's own
timeline (`atrex-mcp runs show --json`) in OUT/<op>/run_timeline.json.

    # CPU (Triton interpreter; the server judges the smoke shape):
    TRITON_INTERPRET=1 python3 measurements/optimise_over_mcp.py \\
        --pair rms_norm:measurements/kernels/rms_norm_two_pass.py:gpu_wiki/kernels/rms_norm.py --out /tmp/loop
    # H200, several pairs, a plan file per pair, 4 spread scored shapes each except OP2's two named
    # ones, 540 s in all:
    python3 measurements/optimise_over_mcp.py --out measurements/results/optimise_over_mcp/h200 --budget-s 540 \\
        --shapes spread:4 --shapes OP2=0,12 --pair OP:BASELINE.py:CANDIDATE.py:PLAN.json --pair OP2:...

A plan file holds any Plan fields (change, category, expected_effect, risks, bottleneck,
bottleneck_detail, knowledge); the script adds the baseline profile's id as evidence and the
wiki ids it read, and takes the bottleneck from the profile where the file gives none.

What each call costs on a GPU (it sets the budget): every validate, submit_baseline and profile
starts a fresh sandbox worker (about 5 s on the H200, imports and CUDA) whose Triton cache is
empty, so each compiles the kernels again; profile_kernel wraps its worker in Nsight Compute;
record_iteration checks the candidate (3 seeds, a worker of its own) and then times it against
the accepted kernel in two more workers: per shape a timing stage of the candidate and 16 paired
rounds of 24 timed calls each (atrex_mcp.runs.evaluator_judge). So a pair has a fixed cost of
six worker starts and two Nsight captures, whatever its shapes; each shape adds its compiles,
its reference calls and its rounds.

The budget is shared among the pairs (each gets an equal share of what is left when it starts,
so one slow operator cannot starve the next; put the cheap ones first), checked before each
step and bounds each call (the client cancels a call that would run past it, which stops the
server's worker). The files are rewritten after every call and each pair's run timeline is
written as soon as the pair ends, so a run stopped by the budget, or killed (SIGTERM, SIGINT),
keeps what it did, with `status` saying so. Exit status 0 only when every pair's loop did what it
should: baseline accepted, the iteration accepted or rejected with its reason (timed, on a GPU),
every step answered; each pair's `verdict` says what was missing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PLAN = {
    "change": "Replace the accepted kernel with the candidate file.",
    "category": "tiling",
    "expected_effect": 1.1,
    "risks": [],
}
MD_ANSWER_CHARS = 2500  # per call in the markdown timeline; the JSON keeps every answer whole
RESERVE_S = 8.0  # kept back from measuring calls so that run_state, package_run and the run's timeline still fit
CHEAP_TOOLS = {"list_problems", "get_problem", "wiki_search", "wiki_read", "start_run", "run_state", "package_run"}
CHEAP_TIMEOUT_S = 90.0  # a cheap call that takes longer is stuck: give up on it, not on the pair's budget


@dataclass
class Pair:
    op: str
    baseline: Path
    candidate: Path
    plan: dict[str, Any]


def parse_pair(text: str) -> Pair:
    """OP:BASELINE.py:CANDIDATE.py[:PLAN.json], paths relative to the current folder."""
    parts = text.split(":")
    if len(parts) not in (3, 4) or not all(parts):
        raise argparse.ArgumentTypeError(f"--pair {text!r}: expected OP:BASELINE.py:CANDIDATE.py[:PLAN.json]")
    op, baseline, candidate = parts[0], Path(parts[1]).resolve(), Path(parts[2]).resolve()
    for path in (baseline, candidate):
        if not path.is_file():
            raise argparse.ArgumentTypeError(f"--pair {text!r}: no file {path}")
    plan: dict[str, Any] = dict(DEFAULT_PLAN)
    if len(parts) == 4:
        plan_path = Path(parts[3])
        try:
            plan.update(json.loads(plan_path.read_text()))
        except (OSError, ValueError) as exc:
            raise argparse.ArgumentTypeError(
                f"--pair {text!r}: plan file {plan_path} is not readable JSON ({exc})"
            ) from None
    return Pair(op, baseline, candidate, plan)


def parse_shapes(text: str) -> tuple[str | None, str]:
    """--shapes SPEC (every pair) or OP=SPEC (that operator's pair); SPEC as choose_shapes reads it."""
    op, _, spec = text.rpartition("=") if "=" in text else (None, "", text)
    spec = spec.strip()
    if op is not None and not op.strip():
        raise argparse.ArgumentTypeError(f"--shapes {text!r}: expected SPEC or OP=SPEC")
    if spec.startswith("spread:"):
        count = spec.split(":", 1)[1]
        if not count.isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(f"--shapes {text!r}: spread:N needs a whole number N >= 1")
    elif not spec or not any(part.strip() for part in spec.split(",")):
        raise argparse.ArgumentTypeError(f"--shapes {text!r}: no shape named (smoke, all, spread:N or ids 0,5,9)")
    return (op.strip() if op is not None else None), spec


def shape_specs(given: list[tuple[str | None, str]], ops: list[str]) -> dict[str | None, str]:
    """{op or None (every other pair): spec}; an OP= naming no pair is an error, not a silent default."""
    specs: dict[str | None, str] = {}
    for op, spec in given:
        if op is not None and op not in ops:
            raise ValueError(f"--shapes {op}={spec}: no --pair for {op} (pairs: {', '.join(ops)})")
        specs[op] = spec
    return specs


def check_against_problems(specs: dict[str | None, str], ops: list[str]) -> None:
    """Every operator is served and every shape id named in a list is one of its shapes (the
    visible shapes.json): a typo is refused before the server starts, not after a pair's budget."""
    from atrex_mcp.errors import AtrexError
    from atrex_mcp.problemset.catalog import Catalog

    catalog = Catalog()
    for op in ops:
        spec = specs.get(op, specs.get(None)) or ""
        try:
            visible = catalog.visible(op)
            if spec not in ("smoke", "all") and not spec.startswith("spread:"):
                for shape_id in (part.strip() for part in spec.split(",") if part.strip()):
                    visible.shape(shape_id)
        except AtrexError as exc:
            raise ValueError(f"--pair/--shapes for {op}: {exc.info.message} {exc.info.hint}") from None


def source_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def abbreviate(arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments as recorded: a kernel source becomes its hash and length."""
    return {
        k: {"sha256": source_digest(v), "chars": len(v)} if k == "source" and isinstance(v, str) else v
        for k, v in arguments.items()
    }


def wiki_query(op: str) -> str:
    """What an agent would type: the operator in words, the DSL and the GPU."""
    return f"{op.replace('_', ' ')} triton kernel h200"


def choose_shapes(spec: str | None, problem: dict[str, Any], gpu: bool) -> list[str] | None:
    """Target shapes from --shapes: 'smoke', 'all' (None: every scored shape), 'spread:N' (N scored
    shapes spread evenly over the list) or a comma list. Default: smoke on CPU, all on a GPU.
    `problem` is get_problem's answer, or list_problems' entry when get_problem failed (its
    scored shapes are then taken to be numbered 0..N-1, as every problem numbers them)."""
    if "shapes" in problem:
        scored = [s["id"] for s in problem["shapes"] if not s["smoke"]]
        smoke = [s["id"] for s in problem["shapes"] if s["smoke"]]
    else:
        scored = [str(i) for i in range(problem["scored_shapes"])]
        smoke = [problem["smoke_shape"]] if problem.get("smoke_shape") else []
    spec = spec or ("all" if gpu else "smoke")
    if spec == "smoke":
        return smoke[:1] or scored[:1]
    if spec == "all":
        return None
    if spec.startswith("spread:"):
        n = max(1, int(spec.split(":", 1)[1]))
        if n >= len(scored):
            return None
        return [scored[round(i * (len(scored) - 1) / max(1, n - 1))] for i in range(n)] if n > 1 else scored[:1]
    return [s.strip() for s in spec.split(",") if s.strip()]


def shapes_left_out(problem: dict[str, Any]) -> list[str]:
    """The shape ids a cut get_problem answer names as left out (its note: '... left out: ids 13, 14)')."""
    ids: list[str] = []
    for note in problem.get("notes", []):
        for match in re.finditer(r"shapes \(first \d+ of \d+ items; left out: ids ([^)]*)\)", note):
            ids += [i.strip() for i in match.group(1).split(",") if i.strip()]
    return list(dict.fromkeys(ids))


class BudgetSpent(Exception):
    """The budget ran out before a step could start."""


class Recorder:
    """Calls tools through one MCP client, records each call, rewrites the files after each."""

    def __init__(self, client: Any, out: Path, budget_s: float, meta: dict[str, Any]):
        self.client = client
        self.out = out
        self.t0 = time.monotonic()
        self.budget_s = budget_s
        self.pair_deadline_s = budget_s  # seconds since t0 by which the current pair must be done
        self.calls: list[dict[str, Any]] = []
        self.result: dict[str, Any] = {**meta, "status": "running", "pairs": []}

    def left_s(self) -> float:
        return min(self.budget_s, self.pair_deadline_s) - (time.monotonic() - self.t0)

    def share_budget(self, pairs_left: int) -> None:
        """Give the next pair an equal share of what is left, so one slow operator cannot starve the others."""
        now = time.monotonic() - self.t0
        self.pair_deadline_s = now + (self.budget_s - now) / max(1, pairs_left)

    async def call(self, op: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One tool call; its answer (structured content, or the error text). Raises BudgetSpent
        when the pair's budget cannot cover a start, and bounds the call by what is left
        (a measuring call leaves RESERVE_S for the cheap calls that close the run)."""
        left = self.left_s() - (0.0 if tool in CHEAP_TOOLS else RESERVE_S)
        if left < 1.0:
            raise BudgetSpent(f"{tool}: {left:.0f} s of the pair's budget left")
        budget_bound = tool not in CHEAP_TOOLS or left < CHEAP_TIMEOUT_S
        if tool in CHEAP_TOOLS:
            left = min(left, CHEAP_TIMEOUT_S)
        entry: dict[str, Any] = {
            "n": len(self.calls) + 1,
            "op": op,
            "tool": tool,
            "arguments": abbreviate(arguments),
            "started_s": round(time.monotonic() - self.t0, 3),
            "progress": [],
        }
        started = time.monotonic()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            entry["progress"].append(
                {"at_s": round(time.monotonic() - started, 2), "progress": progress, "message": message}
            )

        try:
            result = await self.client.call_tool(
                tool, arguments, read_timeout_seconds=left, progress_callback=on_progress
            )
        except anyio.get_cancelled_exc_class():  # a signal stopped the loop: the call in flight is part of the record
            entry.update(is_error=True, answer=None, error="interrupted: the script was stopped while it ran")
            entry["wall_s"] = round(time.monotonic() - started, 3)
            self.calls.append(entry)
            self.save()
            raise
        except Exception as exc:  # noqa: BLE001 - a timeout past the budget, or the server went away
            entry["is_error"] = True
            entry["answer"] = None
            entry["error"] = f"{type(exc).__name__}: {exc}"
            if budget_bound and time.monotonic() - started >= left - 1.0:
                entry["cut_by_budget"] = True  # the client gave up at the budget's bound: not the tool's fault
                entry["error"] += f" (cut at the budget's bound of {left:.0f} s)"
        else:
            text = "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")
            entry["is_error"] = bool(result.is_error)
            entry["answer"] = (
                result.structured_content if not result.is_error and result.structured_content is not None else text
            )
            entry["error"] = text if result.is_error else None
        entry["wall_s"] = round(time.monotonic() - started, 3)
        self.calls.append(entry)
        self.save()
        return entry

    def save(self, status: str | None = None) -> None:
        if status:
            self.result["status"] = status
        self.result["wall_s"] = round(time.monotonic() - self.t0, 2)
        self.result["calls"] = self.calls
        self.out.mkdir(parents=True, exist_ok=True)
        for name, text in (
            ("timeline.json", json.dumps(self.result, indent=2, default=str) + "\n"),
            ("timeline.md", render_markdown(self.result)),
        ):
            tmp = self.out / (name + ".tmp")
            tmp.write_text(text)
            tmp.replace(self.out / name)  # a kill mid-write keeps the previous complete file


def _answer(entry: dict[str, Any]) -> dict[str, Any]:
    return entry["answer"] if isinstance(entry.get("answer"), dict) and not entry["is_error"] else {}


async def optimise_pair(rec: Recorder, pair: Pair, args: argparse.Namespace, gpu: bool) -> dict[str, Any]:
    """The agent's loop for one operator; returns what happened, step by step."""
    op = pair.op
    done: dict[str, Any] = {"op": op, "baseline": str(pair.baseline), "candidate": str(pair.candidate), "steps": {}}
    rec.result["pairs"].append(done)
    baseline_src, candidate_src = pair.baseline.read_text(), pair.candidate.read_text()

    async def step(name: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        entry = await rec.call(op, tool, arguments)
        done["steps"][name] = {"call": entry["n"], "ok": not entry["is_error"], "wall_s": entry["wall_s"]}
        return _answer(entry)

    problem: dict[str, Any] | None = await step("get_problem", "get_problem", {"op": op})
    if not problem:  # carry on with what list_problems said of the operator, as an agent would
        problem = next((p for p in rec.result.get("problems", []) if p["name"] == op), None)
        if problem is None:
            done["stopped"] = "get_problem failed and list_problems does not name the operator"
            return done
        done["get_problem_failed"] = True
    left_out = shapes_left_out(problem)
    if left_out:  # the answer was cut to fit: ask for the rest, as its note says
        rest = await step("get_problem_rest", "get_problem", {"op": op, "shape_ids": left_out})
        problem = {**problem, "shapes": problem["shapes"] + rest.get("shapes", [])}
    shapes = choose_shapes(args.shapes.get(op, args.shapes.get(None)), problem, gpu)
    done["shapes"] = shapes or "all scored"
    found = await step("wiki_search", "wiki_search", {"query": wiki_query(op)})
    hits = [h["doc_id"] for h in found.get("hits", [])]
    read: list[str] = []
    if hits and await step("wiki_read", "wiki_read", {"doc_id": hits[0]}):
        read.append(hits[0])
    checked = await step(
        "validate_baseline", "validate", {"op": op, "source": baseline_src, "shapes": shapes, "seeds": 1}
    )
    if not checked or checked.get("failed") or not checked.get("compiled"):
        done["stopped"] = "the baseline did not validate"
        return done
    run = await step("start_run", "start_run", {"op": op, "shapes": shapes, "workspace": str(args.workspace)})
    run_id = run.get("run_id")
    if not run_id:
        return done
    done["run_id"] = run_id
    try:
        await measure_run(step, rec.left_s, done, pair, run, read, baseline_src, candidate_src)
    except BudgetSpent as spent:  # the closing calls below still fit in the reserve
        done["not_run"] = f"budget spent before {spent}"
    await step("run_state", "run_state", {"run_id": run_id})
    package = await step("package_run", "package_run", {"run_id": run_id, "out_dir": f"atrex-package/{run_id}"})
    done["package"] = package.get("artifact")
    return done


async def measure_run(
    step: Any,
    left_s: Any,
    done: dict[str, Any],
    pair: Pair,
    run: dict[str, Any],
    read: list[str],
    baseline_src: str,
    candidate_src: str,
) -> None:
    """Profile and submit the baseline, then record the candidate with a plan citing that profile;
    profile the candidate once accepted, unless what is left of the pair's budget is less than the
    baseline's profile took (a call bound to be cut would only turn a whole loop into an error)."""
    op, run_id = pair.op, run["run_id"]
    profile_shape = run["shapes"][0]
    profile = await step(
        "profile_baseline",
        "profile_kernel",
        {"op": op, "source": baseline_src, "shape": profile_shape, "run_id": run_id},
    )
    baseline = await step("submit_baseline", "submit_baseline", {"run_id": run_id, "source": baseline_src})
    done["baseline_record"] = {k: (baseline.get("record") or {}).get(k) for k in ("number", "status", "reason")}
    if not baseline or not profile.get("profile_id"):
        done["stopped"] = "no baseline or no profile to cite"
        return
    bottleneck = profile.get("bottleneck") or {}
    plan = {
        **pair.plan,
        "evidence": [profile["profile_id"]],
        "knowledge": list(dict.fromkeys([*pair.plan.get("knowledge", []), *read])),
    }
    plan.setdefault("bottleneck", bottleneck.get("kind", "unknown"))
    plan.setdefault("bottleneck_detail", "; ".join(bottleneck.get("evidence", [])[:3])[:2000])
    done["plan"] = plan
    iteration = await step(
        "record_iteration", "record_iteration", {"run_id": run_id, "plan": plan, "source": candidate_src}
    )
    record = iteration.get("record") or {}
    done["iteration"] = {k: record.get(k) for k in ("number", "status", "reason")} | {
        "timed": iteration.get("timed"),
        "decision": record.get("decision"),
    }
    if record.get("status") != "accepted":
        return
    took, left = done["steps"]["profile_baseline"]["wall_s"], left_s() - RESERVE_S
    if left < 1.2 * took:
        done["skipped"] = (
            f"profile_candidate: {left:.0f} s of the pair's budget left, the baseline's profile took {took:.0f} s"
        )
    else:  # the next plan's evidence: where the new accepted kernel spends its time
        await step(
            "profile_candidate",
            "profile_kernel",
            {"op": op, "source": candidate_src, "shape": profile_shape, "run_id": run_id},
        )


def pair_problems(done: dict[str, Any], gpu: bool) -> list[str]:
    """What this pair's loop did not do that it should have; empty when the loop is whole."""
    problems = [f"stopped: {done['stopped']}"] if done.get("stopped") else []
    if done.get("not_run"):
        problems.append(f"not run: {done['not_run']}")
    problems += [f"{name} answered an error" for name, s in done["steps"].items() if not s["ok"]]
    expected = ["get_problem", "validate_baseline", "start_run", "profile_baseline", "submit_baseline"]
    expected += ["record_iteration", "run_state", "package_run"]
    iteration = done.get("iteration") or {}
    if iteration.get("status") == "accepted" and not done.get("skipped"):
        expected.append("profile_candidate")
    missing = [name for name in expected if name not in done["steps"]]
    if missing:
        problems.append(f"not called: {', '.join(missing)}")
    if (done.get("baseline_record") or {}).get("status") != "accepted":
        problems.append("the baseline was not accepted")
    if iteration.get("status") not in ("accepted", "rejected") or not iteration.get("reason"):
        status = iteration.get("status") or "missing"
        problems.append(f"the iteration is {status}, not accepted or rejected with a reason")
    elif gpu and not iteration.get("timed"):
        problems.append("the iteration was not timed although the server has a GPU")
    if done.get("run_id") and not done.get("run_timeline"):
        problems.append("the run's timeline (runs show --json) was not written")
    return list(dict.fromkeys(problems))


def runs_show(state_dir: Path, run_id: str) -> dict[str, Any]:
    """The run's own timeline, as the operator's CLI prints it."""
    cmd = [sys.executable, "-m", "atrex_mcp.cli", "runs", "show", run_id, "--json", "--state-dir", str(state_dir)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return {"error": "runs show took over 60 s", "command": " ".join(cmd)}
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout).strip()[-2000:], "command": " ".join(cmd)}
    return json.loads(done.stdout)


def _summary(entry: dict[str, Any]) -> str:
    """One line an agent would take from the answer."""
    if entry["is_error"]:
        return "ERROR: " + (entry["error"] or "").replace("\n", " | ")[:300]
    a = entry["answer"] if isinstance(entry["answer"], dict) else {}
    tool = entry["tool"]
    if tool == "list_problems":
        return f"{len(a.get('problems', []))} problems, mode {a.get('mode')}, knowledge {a.get('knowledge')}"
    if tool == "get_problem":
        return f"{len(a.get('shapes', []))} shapes, {len(a.get('rules', []))} rules"
    if tool == "wiki_search":
        return "hits: " + ", ".join(h["doc_id"] for h in a.get("hits", []))
    if tool == "wiki_read":
        return f"{a.get('doc', {}).get('doc_id')}: {len(a.get('doc', {}).get('text', ''))} chars"
    if tool == "validate":
        times = [s.get("time_ms") for s in a.get("shapes", [])]
        return (
            f"compiled={a.get('compiled')} passed={a.get('passed')} failed={a.get('failed')} device={a.get('device')} "
            f"times_ms={times} operator_score={a.get('operator_score')}"
        )
    if tool == "profile_kernel":
        b = a.get("bottleneck", {})
        evidence = "; ".join(b.get("evidence", []))[:200]
        return f"{a.get('profile_id')} via {a.get('tool')} (fallback={a.get('fallback')}): {b.get('kind')} — {evidence}"
    if tool == "start_run":
        return f"{a.get('run_id')} on shapes {a.get('shapes')}"
    if tool in ("submit_baseline", "record_iteration"):
        r = a.get("record", {})
        d = r.get("decision") or {}
        ci = f"CI [{d.get('ci_low')}, {d.get('ci_high')}]"
        return f"#{r.get('number')} {r.get('status')}: {r.get('reason')} (speed-up {d.get('speedup')}, {ci})"
    if tool == "run_state":
        return f"summary {a.get('summary')}"
    if tool == "package_run":
        return f"{a.get('artifact')}"
    return ""


def render_markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# The optimisation loop over MCP: {', '.join(p['op'] for p in result['pairs']) or '(no pair started)'}",
        "",
        f"{result['date']}; {result['device']}; server: `{' '.join(result['server_command'])}`; "
        f"status **{result['status']}**; "
        f"wall time {result.get('wall_s', 0):.1f} s of a {result['budget_s']:.0f} s budget.",
        "",
        "| # | op | tool | wall s | error | what the answer says |",
        "|---|---|---|---|---|---|",
    ]
    for c in result.get("calls", []):
        lines.append(
            f"| {c['n']} | {c['op']} | {c['tool']} | {c['wall_s']:.2f} | {'yes' if c['is_error'] else ''} | "
            f"{_summary(c).replace('|', '/')} |"
        )
    for p in result["pairs"]:
        lines += [
            "",
            f"## {p['op']}",
            "",
            f"- baseline `{p['baseline']}`, candidate `{p['candidate']}`, shapes {p.get('shapes')}",
            f"- run {p.get('run_id')}; iteration {p.get('iteration')}; package {p.get('package')}",
        ]
        if p.get("stopped"):
            lines.append(f"- stopped: {p['stopped']}")
        if p.get("not_run"):
            lines.append(f"- not run: {p['not_run']}")
        if p.get("skipped"):
            lines.append(f"- skipped: {p['skipped']}")
        if p.get("verdict"):
            lines.append(f"- verdict: {p['verdict'] if p['verdict'] == 'ok' else '; '.join(p['verdict'])}")
    lines += ["", "## Calls in full", ""]
    for c in result.get("calls", []):
        body = json.dumps(c["answer"], indent=1, default=str) if c["answer"] is not None else (c["error"] or "")
        cut = "" if len(body) <= MD_ANSWER_CHARS else f"\n… ({len(body)} chars; the whole answer is in timeline.json)"
        lines += [
            f"### {c['n']}. {c['tool']} ({c['op']}, {c['wall_s']:.2f} s{', error' if c['is_error'] else ''})",
            "",
            f"arguments: `{json.dumps(c['arguments'], default=str)[:1500]}`",
            "",
            "```",
            body[:MD_ANSWER_CHARS] + cut,
            "```",
            "",
        ]
    return "\n".join(lines) + "\n"


def write_run_timeline(out: Path, state_dir: Path, done: dict[str, Any]) -> None:
    """OUT/<op>/run_timeline.json: the pair's run as `atrex-mcp runs show --json` prints it."""
    if not done.get("run_id") or done.get("run_timeline"):
        return
    shown = runs_show(state_dir, done["run_id"])
    (out / done["op"]).mkdir(parents=True, exist_ok=True)
    (out / done["op"] / "run_timeline.json").write_text(json.dumps(shown, indent=2) + "\n")
    if "error" in shown:
        done["run_timeline_error"] = shown["error"]
    else:
        done["run_timeline"] = f"{done['op']}/run_timeline.json"


async def drive_pairs(rec: Recorder, client: Any, args: argparse.Namespace, gpu: bool) -> None:
    """Every pair in turn, each with its share of the budget; its run timeline as soon as it ends."""
    rec.result["tools"] = [t.name for t in (await client.list_tools()).tools]
    try:
        listed = await rec.call("-", "list_problems", {})
    except BudgetSpent:
        return
    rec.result["problems"] = _answer(listed).get("problems", [])
    for index, pair in enumerate(args.pair):
        rec.share_budget(len(args.pair) - index)
        try:
            await optimise_pair(rec, pair, args, gpu)
        except BudgetSpent as spent:
            rec.result["pairs"][-1]["not_run"] = f"budget spent before {spent}"
        await anyio.to_thread.run_sync(write_run_timeline, args.out, args.state_dir, rec.result["pairs"][-1])
        rec.save()


async def stop_on_signal(rec: Recorder, scope: anyio.CancelScope) -> None:
    """SIGTERM (an outer `timeout`) or SIGINT: stop the loop so that what it did is written."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            rec.result["killed_by"] = signal.Signals(signum).name
            scope.cancel()
            return


def final_status(rec: Recorder) -> str:
    if rec.result.get("killed_by"):
        return f"killed by {rec.result['killed_by']}"
    if any(p.get("not_run") for p in rec.result["pairs"]) or any(c.get("cut_by_budget") for c in rec.calls):
        return "stopped by the budget"
    return "finished"


async def main_async(args: argparse.Namespace) -> int:
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    gpu = _has_gpu()
    serve = [
        sys.executable,
        "-m",
        "atrex_mcp.cli",
        "serve",
        "--state-dir",
        str(args.state_dir),
        "--workspace",
        str(args.workspace),
        "--knowledge",
        "full" if not args.benchmark_mode else args.knowledge or "general",
    ]
    if args.benchmark_mode:
        serve.append("--benchmark-mode")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    meta = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": _device_name(),
        "server_command": serve,
        "budget_s": args.budget_s,
        "benchmark_mode": args.benchmark_mode,
        "shapes_option": {op or "*": spec for op, spec in args.shapes.items()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    rec: Recorder | None = None
    try:
        with open(args.out / "server.log", "w") as errlog:
            params = StdioServerParameters(command=serve[0], args=serve[1:], env=env, cwd=str(args.workspace))
            async with Client(stdio_client(params, errlog=errlog)) as client:
                rec = Recorder(client, args.out, args.budget_s, meta)
                async with anyio.create_task_group() as group:
                    group.start_soon(stop_on_signal, rec, group.cancel_scope)
                    await drive_pairs(rec, client, args, gpu)
                    group.cancel_scope.cancel()
    finally:
        if rec is not None:  # what the loop did is written however it ended
            for p in rec.result["pairs"]:
                write_run_timeline(args.out, args.state_dir, p)
            status = final_status(rec)
            for p in rec.result["pairs"]:
                p["verdict"] = pair_problems(p, gpu) or "ok"
            rec.save(status)
    whole = status == "finished" and len(rec.result["pairs"]) == len(args.pair)
    whole = whole and all(p["verdict"] == "ok" for p in rec.result["pairs"])
    whole = whole and not any(c["is_error"] for c in rec.calls if c["op"] == "-")
    errors = sum(c["is_error"] for c in rec.calls)
    print(f"{status}: {len(rec.calls)} calls, {errors} errors; {args.out / 'timeline.md'}")
    for p in rec.result["pairs"]:
        it, base = p.get("iteration") or {}, p.get("baseline_record") or {}
        verdict = "ok" if p["verdict"] == "ok" else "NOT OK: " + "; ".join(p["verdict"])
        verdict += f" (skipped {p['skipped']})" if p.get("skipped") else ""
        print(f" {p['op']}: {verdict}; baseline {base.get('status')}; iteration {it.get('status')}: {it.get('reason')}")
    return 0 if whole else 1


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (Triton interpreter)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument(
        "--pair",
        type=parse_pair,
        action="append",
        required=True,
        metavar="OP:BASELINE.py:CANDIDATE.py[:PLAN.json]",
        help="an operator, its baseline kernel, the candidate and an optional plan file (repeatable)",
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="folder for timeline.{json,md}, server.log and <op>/run_timeline.json"
    )
    parser.add_argument(
        "--shapes",
        type=parse_shapes,
        action="append",
        default=[],
        metavar="[OP=]SPEC",
        help="target shapes of each run: smoke, all, spread:N or a comma list of ids; OP=SPEC for one pair's run "
        "(repeatable; default: smoke on CPU, all on a GPU)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="the server's state directory: runs, profiles, wiki index (default: a new temporary folder)",
    )
    parser.add_argument(
        "--workspace", type=Path, help="the server's workspace, where packages are written (default OUT/workspace)"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=540.0,
        help="stop starting steps after this many seconds, and bound each call by what is left",
    )
    parser.add_argument(
        "--benchmark-mode", action="store_true", help="serve in benchmark mode (hidden figures stay on the server)"
    )
    parser.add_argument(
        "--knowledge", choices=("general", "full"), help="with --benchmark-mode: the wiki condition (default general)"
    )
    args = parser.parse_args(argv)
    ops = [pair.op for pair in args.pair]
    if len(set(ops)) != len(ops):
        parser.error(f"--pair: each operator once (given: {', '.join(ops)})")
    try:
        args.shapes = shape_specs(args.shapes, ops)
        check_against_problems(args.shapes, ops)
    except ValueError as exc:
        parser.error(str(exc))
    args.out = args.out.resolve()
    own_state = args.state_dir is None
    args.state_dir = (args.state_dir or Path(tempfile.mkdtemp(prefix="atrex-loop-state-"))).resolve()
    args.workspace = (args.workspace or args.out / "workspace").resolve()
    args.workspace.mkdir(parents=True, exist_ok=True)
    try:
        return anyio.run(main_async, args)
    except Exception as exc:  # noqa: BLE001 - e.g. the server did not start: one line, the detail in a file
        (args.out / "error.txt").write_text(traceback.format_exc())
        print(
            f"optimise_over_mcp: stopped by {type(exc).__name__}: {str(exc)[:300]} "
            f"(traceback in {args.out / 'error.txt'}, the server's stderr in {args.out / 'server.log'})",
            file=sys.stderr,
        )
        return 2
    finally:
        if own_state:  # each run's timeline is in OUT; the rest (wiki index, sources) goes
            shutil.rmtree(args.state_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
