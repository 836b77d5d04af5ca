"""Agent-driven benchmark runs: drive a coding agent (Claude Code, Codex, or any command) over
the operators with only the visible surface in reach, collect what it packages, judge it on the
trusted side, and report the paper's tables and figures.

A run directory holds everything (see `layout.RunLayout`):

    RUN_DIR/run.json              the run's settings (agent, operators, condition, budget, …)
    RUN_DIR/ops/<op>/             trusted side: state.json, prompt, transcript, server log, submission/
    RUN_DIR/agents/<op>/work/     the agent's workspace: visible files + PROMPT.md (owned by the agent's uid)
    RUN_DIR/agents/<op>/home/     the agent's HOME (its CLI config, the MCP config)
    RUN_DIR/eval/                 trusted evaluation results (EvalResult JSON per operator, baselines/)
    RUN_DIR/report/               report.md, report.html, report.json, figures (PNG)

`bench run` → `runner.run_bench`, `bench eval` → `evaluation.evaluate_run`,
`bench report` → `report.build_report` + `report_render`.
"""
