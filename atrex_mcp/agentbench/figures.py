"""The report's figures (PNG, matplotlib's Agg backend, no display needed):

* correctness_dsl.png: per run, the operator-balanced correctness next to the share of
  DSL-dominant operators;
* s_by_regime.png: S_i of each operator, grouped by memory- and compute-bound regime, per run;
* s_vs_weight.png: S_i of each operator against its production weight.

A quantity that was not measured is not drawn: the panel says so in words instead.
"""

from __future__ import annotations

from pathlib import Path

from atrex_mcp.agentbench.report import BenchReport

FIGURES = {
    "correctness_dsl.png": "Correctness and DSL-dominant operators per run",
    "s_by_regime.png": "S_i by regime (memory- vs compute-bound)",
    "s_vs_weight.png": "S_i against production weight",
}
REGIMES = ("memory", "compute", "mixed")
_DPI = 110


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _not_measured(ax, text: str) -> None:
    ax.text(
        0.5,
        0.5,
        text,
        ha="center",
        va="center",
        wrap=True,
        fontsize=11,
        transform=ax.transAxes,
        bbox={"boxstyle": "round", "facecolor": "#f4f4f4", "edgecolor": "#999999"},
    )
    ax.set_xticks([])
    ax.set_yticks([])


def _untimed_text(report: BenchReport) -> str:
    reasons = sorted({f"{r.row.run}: {r.row.s_note}" for r in report.runs if r.row.s_note} or {"no run was timed"})
    return "S not measured: nothing is plotted.\n" + "\n".join(reasons)


def correctness_dsl(report: BenchReport, path: Path) -> None:
    plt = _pyplot()
    runs = [r.row for r in report.runs]
    fig, ax = plt.subplots(figsize=(max(5.5, 1.6 * len(runs) + 2), 3.8))
    width = 0.36
    for i, row in enumerate(runs):
        ax.bar(i - width / 2, row.correctness, width, color="#3a7dc9", label="correctness" if i == 0 else None)
        ax.text(i - width / 2, row.correctness + 0.02, f"{row.correctness:.0%}", ha="center", fontsize=9)
        if row.dsl_adoption is None:
            ax.text(
                i + width / 2,
                0.04,
                "DSL share\nnot measured",
                ha="center",
                va="bottom",
                fontsize=8,
                color="#555555",
                rotation=90,
            )
        else:
            ax.bar(
                i + width / 2,
                row.dsl_adoption,
                width,
                color="#e08a2c",
                label="DSL-dominant operators" if i == 0 else None,
            )
            ax.text(i + width / 2, row.dsl_adoption + 0.02, f"{row.dsl_adoption:.0%}", ha="center", fontsize=9)
    ax.set_xticks(range(len(runs)), [r.run for r in runs], rotation=15 if len(runs) > 3 else 0)
    ax.set_xlim(-0.6, len(runs) - 0.4)
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("share of the run's operators")
    ax.set_title(FIGURES["correctness_dsl.png"])
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)


def _s_panel(report: BenchReport, path: Path, name: str, draw) -> None:
    """The frame both S figures share: `draw(ax, timed_runs)` fills it, or it says why S is missing."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    timed = [r for r in report.runs if r.row.timed]
    if timed:
        draw(ax, timed)
    else:
        _not_measured(ax, _untimed_text(report))
    ax.set_title(FIGURES[name])
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)


def s_by_regime(report: BenchReport, path: Path) -> None:
    def draw(ax, timed) -> None:
        spread = 0.8 / len(timed)
        for j, run in enumerate(timed):
            for i, regime in enumerate(REGIMES):
                values = [line.score for line in run.operators if line.regime == regime and line.score is not None]
                x = i - 0.4 + spread * (j + 0.5)
                ax.scatter(
                    [x] * len(values), values, s=18, alpha=0.75, color=f"C{j}", label=run.row.run if i == 0 else None
                )
                if values:
                    ax.hlines(
                        sorted(values)[len(values) // 2], x - spread / 3, x + spread / 3, color=f"C{j}", linewidth=2
                    )
        ax.set_xticks(range(len(REGIMES)), [f"{r}-bound" if r != "mixed" else "mixed" for r in REGIMES])
        ax.set_ylabel(f"S_i on {report.hardware} (1 = speed of light)")
        ax.axhline(1.0, color="#999999", linestyle=":", linewidth=1)
        ax.legend(fontsize=8)

    _s_panel(report, path, "s_by_regime.png", draw)


def s_vs_weight(report: BenchReport, path: Path) -> None:
    def draw(ax, timed) -> None:
        for j, run in enumerate(timed):
            points = [
                (line.weight, line.score, line.op) for line in run.operators if line.weight and line.score is not None
            ]
            ax.scatter(
                [p[0] for p in points], [p[1] for p in points], s=22, alpha=0.8, color=f"C{j}", label=run.row.run
            )
            for weight, score, op in points:
                ax.annotate(op, (weight, score), fontsize=6, xytext=(3, 2), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel("production weight w_i (normalised)")
        ax.set_ylabel(f"S_i on {report.hardware}")
        ax.legend(fontsize=8)

    _s_panel(report, path, "s_vs_weight.png", draw)


def draw_all(report: BenchReport, out_dir: Path) -> dict[str, Path]:
    """Every figure as PNG in `out_dir`: {file name: path}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    painters = {"correctness_dsl.png": correctness_dsl, "s_by_regime.png": s_by_regime, "s_vs_weight.png": s_vs_weight}
    paths = {}
    for name, paint in painters.items():
        paths[name] = out_dir / name
        paint(report, paths[name])
    return paths
