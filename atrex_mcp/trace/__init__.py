"""Serving traces → a versioned problem-set snapshot (operators, bucketed shapes, Eq. 2–3 weights).

`import_traces` writes a snapshot built from torch.profiler traces (`build_snapshot` computes it
without writing); `diff_problem_sets` compares two problem sets. The rules table that maps host operators and kernels
to benchmark operators is
data (rules.json). See docs/trace.md.
"""

from atrex_mcp.trace.diff import diff_problem_sets, render_diff
from atrex_mcp.trace.snapshot import SnapshotContent, TraceSpec, build_snapshot, import_traces

__all__ = ["SnapshotContent", "TraceSpec", "build_snapshot", "diff_problem_sets", "import_traces", "render_diff"]
