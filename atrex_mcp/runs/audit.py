"""The audit view of a run: its whole timeline (masked records included and marked), the masks
with exactly what they hid, the accepted chain and the figures before and after. This is the
operator's view (`atrex-mcp runs show`), read straight from the store, never an agent's."""

from __future__ import annotations

import statistics

from pydantic import BaseModel, Field

from atrex_mcp.runs.iterations import accepted_chain, chain_speedup
from atrex_mcp.runs.models import AuditEvent, IterationRecord, MaskRecord, RunRecord
from atrex_mcp.runs.store import RunStore


class Timeline(BaseModel):
    """Everything recorded about one run."""

    run: RunRecord
    iterations: list[IterationRecord] = Field(
        description="Every iteration in order; `masked` marks those a live mask hides from agents."
    )
    masks: list[MaskRecord] = Field(description="Every partial restart, live or reverted.")
    chain: list[int] = Field(description="Iteration numbers from the baseline to the accepted kernel.")
    speedup_vs_baseline: float | None = Field(description="Product of the accepted chain's paired speed-ups.")
    events: list[AuditEvent] = Field(description="The append-only audit trail.")


def timeline(store: RunStore, run_id: str) -> Timeline:
    run = store.get_run(run_id)
    iterations = store.iterations(run_id)
    chain = accepted_chain(iterations, run.accepted)
    return Timeline(
        run=run,
        iterations=iterations,
        masks=store.masks(run_id),
        chain=[it.number for it in chain],
        speedup_vs_baseline=chain_speedup(chain),
        events=store.events(run_id),
    )


def _median(values: dict[str, float | None]) -> float | None:
    present = [v for v in values.values() if v is not None]
    return statistics.median(present) if present else None


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{suffix}"


def render_timeline(t: Timeline) -> str:
    """Plain-text timeline for a terminal."""
    run = t.run
    lines = [
        f"run {run.run_id}  op {run.op}  dsl {run.dsl}  hardware {run.hardware}  started {run.created_at}",
        f"shapes: {', '.join(run.shapes)}",
    ]
    header = (
        f"{'#':>3}  {'category':<22} {'status':<9} {'speed-up':>9} {'95% CI':>15} {'expected':>8} {'vs':>4}  "
        f"{'masked':<6}  reason"
    )
    lines += ["", header, "-" * len(header)]
    for it in t.iterations:
        d = it.decision
        ci = f"[{d.ci_low:.3f},{d.ci_high:.3f}]" if d and d.ci_low is not None else "—"
        category = it.plan.category.value if it.plan else "(baseline)"
        expected = _fmt(it.plan.expected_effect, ".2f", "x") if it.plan else "—"
        vs = f"#{it.compared_to}" if it.compared_to is not None else "—"
        lines.append(
            f"{it.number:>3}  {category:<22} {it.status:<9} {_fmt(d.speedup if d else None, '.3f', 'x'):>9} {ci:>15} "
            f"{expected:>8} {vs:>4}  {'masked' if it.masked else '':<6}  {it.reason}"
        )
    by_number = {it.number: it for it in t.iterations}
    if t.chain:
        base, last = by_number[t.chain[0]], by_number[t.chain[-1]]
        lines += [
            "",
            f"accepted chain: {' -> '.join(f'#{n}' for n in t.chain)}   speed-up vs baseline: "
            f"{_fmt(t.speedup_vs_baseline, '.3f', 'x')}",
        ]
        lines.append(
            f"median time over shapes: {_fmt(_median(base.times.time_ms), '.4f', ' ms')} (baseline) -> "
            f"{_fmt(_median(last.times.time_ms), '.4f', ' ms')} (accepted)"
        )
        lines.append(
            f"median S over shapes:    {_fmt(_median(base.times.score), '.3f')} (baseline) -> "
            f"{_fmt(_median(last.times.score), '.3f')} (accepted)"
        )
    else:
        lines += ["", "no baseline yet"]
    for m in t.masks:
        state = f"reverted {m.reverted_at}" if m.reverted_at else "live"
        lines.append(
            f"mask {m.mask_id}: seed {m.seed}, fraction {m.fraction}, hid {m.masked or 'nothing'} of {m.eligible} "
            f"({state})"
        )
    lines.append(f"audit trail: {len(t.events)} events")
    return "\n".join(lines)
