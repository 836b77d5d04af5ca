"""The judge: the three-stage gate (compile → correctness → performance), output comparison,
DSL attribution and scoring. Untrusted code runs only in the sandbox worker (sandbox/).

    from atrex_mcp.evaluate import EvalRequest, evaluate
    result = evaluate(EvalRequest(op="rms_norm", source=text), Catalog())

Names are resolved lazily so that `atrex_mcp.evaluate.taxonomy` stays importable without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "evaluate": "atrex_mcp.evaluate.evaluator",
    "Trial": "atrex_mcp.evaluate.evaluator",
    "EvalRequest": "atrex_mcp.evaluate.models",
    "EvalResult": "atrex_mcp.evaluate.models",
    "ShapeResult": "atrex_mcp.evaluate.models",
    "compare_outputs": "atrex_mcp.evaluate.compare",
    "CompareResult": "atrex_mcp.evaluate.compare",
    "open_session": "atrex_mcp.evaluate.workers",
    "LaunchOptions": "atrex_mcp.evaluate.evaluator",
    "CandidateWorker": "atrex_mcp.evaluate.workers",
    "CandidateFailed": "atrex_mcp.evaluate.workers",
    "NVTX_FORWARD": "atrex_mcp.evaluate.workers",
    "Standby": "atrex_mcp.evaluate.standby",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
