"""The optimisation loop's service: start a run, submit its baseline, record iterations that
the server itself verifies, show the (possibly masked) memory, partial restart and undo.

Plain Python over a RunStore and a Judge; the MCP tools (atrex_mcp.server.run_tools) are thin
adapters over this class. No evaluation happens inside a database transaction: a candidate is
measured first, then its verdict is committed only if the accepted kernel it was timed against
is still the accepted one (otherwise it is measured again against the new one).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from atrex_mcp.candidate_contract import check_contract
from atrex_mcp.errors import AtrexError
from atrex_mcp.package import PackageResult, package_source
from atrex_mcp.problemset.catalog import Catalog
from atrex_mcp.problemset.roofline import run_roofline, run_scores
from atrex_mcp.runs.acceptance import AcceptanceRule, decide
from atrex_mcp.runs.dropout import choose_masked
from atrex_mcp.runs.measure import Judge, MeasurementFailed, Progress
from atrex_mcp.runs.models import (
    CategoryTally,
    IterationRecord,
    KernelTimes,
    KernelView,
    MaskRecord,
    Plan,
    RunRecord,
    RunState,
    RunSummary,
)
from atrex_mcp.runs.store import RunStore, StaleAccepted, new_id, now_iso

if TYPE_CHECKING:  # handed in by the server, which imports this module
    from atrex_mcp.policy import Policy

MAX_REMEASURE = 3


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def accepted_chain(iterations: list[IterationRecord], accepted: int | None) -> list[IterationRecord]:
    """Baseline → … → accepted kernel, following each accepted iteration's `compared_to` link."""
    by_number = {it.number: it for it in iterations}
    chain: list[IterationRecord] = []
    current = accepted
    while current is not None and current in by_number:
        chain.append(by_number[current])
        current = by_number[current].compared_to
    return list(reversed(chain))


def chain_speedup(chain: list[IterationRecord]) -> float | None:
    """Accepted kernel against the baseline: the product of the chain's paired speed-ups."""
    if not chain:
        return None
    product = 1.0
    for it in chain[1:]:
        if it.decision is None or it.decision.speedup is None:
            return None
        product *= it.decision.speedup
    return product


class RunService:
    """Run memory with server-verified iterations."""

    def __init__(
        self,
        store: RunStore,
        catalog: Catalog,
        judge: Judge | None = None,
        *,
        rule: AcceptanceRule = AcceptanceRule(),
        doc_exists: Callable[[str], bool] | None = None,
    ):
        self.store = store
        self.catalog = catalog
        self._judge = judge
        self.rule = rule
        self.doc_exists = doc_exists

    @property
    def judge(self) -> Judge:
        if self._judge is None:
            raise AtrexError(
                "internal", "no_judge", "This run service was built without an evaluator, so it cannot measure kernels."
            )
        return self._judge

    # -- start ----------------------------------------------------------------------
    def start_run(
        self,
        op: str,
        shapes: list[str] | None = None,
        dsl: str = "triton",
        hardware: str = "h200",
        workspace_root: str | None = None,
    ) -> RunRecord:
        problem = self.catalog.visible(op)
        shape_ids = list(shapes) if shapes else [s.id for s in problem.scored_shapes]
        for shape_id in shape_ids:
            problem.shape(shape_id)  # raises with the valid choices
        if len(set(shape_ids)) != len(shape_ids):
            raise AtrexError("input", "duplicate_shape", f"Shape ids repeat in {shape_ids}.")
        workspace = {
            "root": workspace_root,
            "visible_files": {
                "reference.py": sha256_text(problem.reference_source),
                "input.py": sha256_text(problem.input_source),
                "shapes.json": sha256_text(problem.shapes_json),
            },
        }
        run = RunRecord(
            run_id=new_id("run"),
            op=op,
            shapes=shape_ids,
            dsl=dsl,
            hardware=hardware,
            workspace=workspace,
            roofline=run_roofline(self.catalog.hidden(op), shape_ids, hardware),
            created_at=now_iso(),
        )
        return self.store.create_run(run)

    def _contract_failure(self, run: RunRecord, source: str) -> str | None:
        """Why `source` could never be packaged (static output-contract check), or None."""
        report = check_contract(source, self.catalog.visible(run.op).reference_source, dsl=run.dsl)
        if report.passed:
            return None
        return "breaks the output contract: " + "; ".join(f"{v.describe()} (fix: {v.fix})" for v in report.violations)

    # -- baseline -------------------------------------------------------------------
    def submit_baseline(
        self, run_id: str, source: str, *, progress: Progress | None = None, cancel: threading.Event | None = None
    ) -> IterationRecord:
        run = self.store.get_run(run_id)
        if run.baseline is not None:
            raise AtrexError(
                "input",
                "baseline_exists",
                f"Run {run_id} already has a baseline (iteration 0).",
                "Submit further kernels with record_iteration.",
            )
        digest = sha256_text(source)
        broken = self._contract_failure(run, source)
        if broken:
            self.store.log_event(run_id, "baseline_refused", {"source_sha256": digest, "reason": broken})
            raise AtrexError(
                "policy",
                "contract_violation",
                f"The baseline {broken}.",
                "Every kernel of a run must be packageable; fix the listed rules and submit again.",
            )
        result = self.judge.check(
            run.op,
            source,
            run.shapes,
            hardware=run.hardware,
            dsl=run.dsl,
            timing=True,
            progress=progress,
            cancel=cancel,
        )
        if not result.correct:
            self.store.log_event(run_id, "baseline_refused", {"source_sha256": digest, "reason": result.failure})
            raise AtrexError(
                "correctness" if result.compiled else "compile",
                "baseline_not_correct",
                f"The baseline must be correct on every target shape: {result.failure}.",
                "Fix the kernel (validate shows per-shape detail) and submit it again.",
            )
        times = KernelTimes(
            time_ms=result.times.time_ms, score=result.times.score or run_scores(run.roofline, result.times.time_ms)
        )
        record = IterationRecord(
            run_id=run_id,
            number=0,
            kind="baseline",
            status="accepted",
            reason="first correct kernel: the baseline and rollback point",
            source_sha256=digest,
            checks=result.checks,
            times=times,
            created_at=now_iso(),
        )
        return self.store.commit_iteration(record, source, expected_accepted=None)

    # -- iterations -----------------------------------------------------------------
    def _check_citations(self, op: str, plan: Plan) -> None:
        found = self.store.profile_ops(plan.evidence)
        missing = [p for p in plan.evidence if p not in found]
        if missing:
            raise AtrexError(
                "input",
                "unknown_evidence",
                f"Plan cites {len(missing)} profile id(s) that were never stored "
                f"(evidence items {', '.join(str(plan.evidence.index(p) + 1) for p in missing)}).",
                "Cite profile ids returned by profile_kernel.",
            )
        foreign = [p for p, profiled_op in found.items() if profiled_op != op]
        if foreign:
            raise AtrexError(
                "input", "evidence_other_op", f"Profiles {', '.join(foreign)} are of another operator than {op}."
            )
        if self.doc_exists is not None:
            unknown = [d for d in plan.knowledge if not self.doc_exists(d)]
            if unknown:
                raise AtrexError(
                    "input",
                    "unknown_knowledge",
                    f"Plan cites {len(unknown)} wiki id(s) that name no document "
                    f"(knowledge items {', '.join(str(plan.knowledge.index(d) + 1) for d in unknown)}).",
                    "Cite doc_id values exactly as wiki_search returned them (e.g. 'docs/recipes/rms-norm', "
                    "'kernels/rms_norm'); wiki_read of a near miss answers with the closest ids.",
                )

    def record_iteration(
        self,
        run_id: str,
        plan: Plan,
        source: str,
        *,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> IterationRecord:
        run = self.store.get_run(run_id)
        if run.baseline is None or run.accepted is None:  # the store sets both with the baseline
            raise AtrexError(
                "input",
                "no_baseline",
                f"Run {run_id} has no baseline yet.",
                "Call submit_baseline with a first correct kernel.",
            )
        self._check_citations(run.op, plan)
        digest = sha256_text(source)
        base = IterationRecord(
            run_id=run_id,
            number=-1,
            kind="iteration",
            status="failed",
            reason="",
            plan=plan,
            source_sha256=digest,
            compared_to=run.accepted,
            created_at=now_iso(),
        )
        broken = self._contract_failure(run, source)
        if broken:
            return self.store.commit_iteration(
                base.model_copy(update={"reason": broken}), source, expected_accepted=run.accepted, check_accepted=False
            )
        result = self.judge.check(
            run.op,
            source,
            run.shapes,
            hardware=run.hardware,
            dsl=run.dsl,
            timing=False,
            progress=progress,
            cancel=cancel,
        )
        if not result.correct:
            return self.store.commit_iteration(
                base.model_copy(update={"checks": result.checks, "reason": result.failure}),
                source,
                expected_accepted=run.accepted,
                check_accepted=False,
            )
        expected = run.accepted
        for _ in range(MAX_REMEASURE):
            record = base.model_copy(update={"compared_to": expected, "checks": result.checks})
            if digest == sha256_text(self.store.source(run_id, expected)):
                record = record.model_copy(update={"status": "rejected", "reason": "identical to the accepted kernel"})
            else:
                record = self._timed_verdict(run, record, expected, source, progress, cancel)
            try:
                return self.store.commit_iteration(record, source, expected_accepted=expected)
            except StaleAccepted as stale:
                expected = stale.current
        record = base.model_copy(
            update={
                "compared_to": expected,
                "checks": result.checks,
                "status": "rejected",
                "reason": f"the accepted kernel changed {MAX_REMEASURE} times while this one was measured",
            }
        )
        return self.store.commit_iteration(record, source, expected_accepted=expected, check_accepted=False)

    def _timed_verdict(
        self,
        run: RunRecord,
        record: IterationRecord,
        accepted_number: int,
        source: str,
        progress: Progress | None,
        cancel: threading.Event | None,
    ) -> IterationRecord:
        accepted_source = self.store.source(run.run_id, accepted_number)
        try:
            samples = self.judge.time_pair(
                run.op, accepted_source, source, run.shapes, hardware=run.hardware, progress=progress, cancel=cancel
            )
        except MeasurementFailed as exc:
            return record.model_copy(
                update={"status": "failed", "reason": f"failed during the paired timing: {exc.reason}"}
            )
        seed = int(sha256_text(f"{run.run_id}|{record.source_sha256}|{accepted_number}")[:8], 16)
        decision = decide(samples, correct=True, rule=self.rule, seed=seed)
        time_ms: dict[str, float | None] = {s.id: s.candidate_ms for s in decision.shapes}
        times = KernelTimes(time_ms=time_ms, score=run_scores(run.roofline, time_ms))
        return record.model_copy(
            update={
                "status": "accepted" if decision.accepted else "rejected",
                "reason": decision.reason,
                "decision": decision,
                "times": times,
            }
        )

    # -- memory view and dropout ----------------------------------------------------------
    def run_state(self, run_id: str) -> RunState:
        """The run's memory with every figure (roofline and S included); what an agent may see
        of it is atrex_mcp.policy's `run_state_view`."""
        run = self.store.get_run(run_id)
        iterations = self.store.iterations(run_id)
        by_number = {it.number: it for it in iterations}
        chain = accepted_chain(iterations, run.accepted)

        def view(number: int | None, speedup: float | None) -> KernelView | None:
            if number is None:
                return None
            it = by_number[number]
            return KernelView(
                number=number,
                source=self.store.source(run_id, number),
                source_sha256=it.source_sha256,
                times=it.times,
                speedup_vs_baseline=speedup,
            )

        visible = [it for it in iterations if it.kind == "iteration" and not it.masked]
        tallies: dict[str, CategoryTally] = {}
        for it in visible:
            assert it.plan is not None
            tally = tallies.setdefault(it.plan.category.value, CategoryTally())
            tally.tried += 1
            tally.accepted += it.status == "accepted"
        speedup = chain_speedup(chain)
        summary = RunSummary(
            recorded=sum(it.kind == "iteration" for it in iterations),
            visible=len(visible),
            masked=sum(it.masked for it in iterations),
            accepted=sum(it.status == "accepted" for it in visible),
            rejected=sum(it.status == "rejected" for it in visible),
            failed=sum(it.status == "failed" for it in visible),
            by_category=tallies,
            speedup_vs_baseline=speedup,
        )
        live = [m.mask_id for m in self.store.masks(run_id) if m.reverted_at is None]
        return RunState(
            run_id=run.run_id,
            op=run.op,
            shapes=run.shapes,
            dsl=run.dsl,
            hardware=run.hardware,
            roofline=run.roofline,
            baseline=view(run.baseline, 1.0 if run.baseline is not None else None),
            accepted=view(run.accepted, speedup),
            summary=summary,
            iterations=visible,
            live_masks=live,
        )

    def partial_restart(self, run_id: str, fraction: float, seed: int) -> MaskRecord:
        if not 0.0 <= fraction <= 1.0:
            raise AtrexError("input", "bad_fraction", f"fraction must lie in [0, 1], got {fraction}.")
        self.store.get_run(run_id)
        return self.store.add_mask(run_id, seed, fraction, choose_masked)

    def unmask(self, run_id: str, mask_id: str | None = None) -> list[MaskRecord]:
        self.store.get_run(run_id)
        return self.store.revert_masks(run_id, mask_id)

    # -- package --------------------------------------------------------------------
    def package(
        self, run_id: str, out_dir: Path, *, policy: Policy | None = None, denied: Sequence[Path] = ()
    ) -> PackageResult:
        """The accepted kernel as a deliverable, with the run's provenance in the manifest; never
        written inside a `denied` root (package_source refuses the problem roots itself). Which
        figures the manifest carries is `policy.package_figures`' decision (the server passes its
        policy; without one, the operator's own scripts get every figure)."""
        run = self.store.get_run(run_id)
        if run.accepted is None:
            raise AtrexError(
                "input", "no_baseline", f"Run {run_id} has no accepted kernel yet.", "Submit a baseline first."
            )
        chain = accepted_chain(self.store.iterations(run_id), run.accepted)
        base, final = chain[0], chain[-1]
        figures = {
            "hardware": run.hardware,
            "shapes": run.shapes,
            "time_ms": final.times.time_ms,
            "baseline_time_ms": base.times.time_ms,
            "speedup_vs_baseline": chain_speedup(chain),
            "timing": (
                "accepted kernel: medians of its interleaved comparison against its predecessor; baseline: the "
                "evaluator's timing"
            ),
        }
        scores = {"score": final.times.score, "baseline_score": base.times.score}
        figures = policy.package_figures(figures, scores) if policy is not None else {**figures, **scores}
        provenance = {
            "run_id": run_id,
            "accepted_iteration": final.number,
            "chain": [
                {
                    "number": it.number,
                    "kind": it.kind,
                    "category": it.plan.category.value if it.plan else None,
                    "source_sha256": it.source_sha256,
                    "speedup": it.decision.speedup if it.decision else None,
                    "reason": it.reason,
                }
                for it in chain
            ],
            "final": figures,
        }
        result = package_source(
            self.store.source(run_id, final.number),
            run.op,
            self.catalog,
            out_dir,
            dsl=run.dsl,
            provenance=provenance,
            denied=denied,
        )
        self.store.log_event(
            run_id, "packaged", {"artifact": result.artifact, "sha256": result.sha256, "accepted": final.number}
        )
        return result
