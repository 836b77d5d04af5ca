"""Hand-written Kineto-style traces with known times, for the trace-import tests.

The builder writes the event categories and arguments that torch.profiler's
export_chrome_trace writes (cpu_op with Input Dims / Input type / Concrete Inputs and
External id, cuda_runtime launches and kernels sharing a correlation id, user_annotation and
gpu_user_annotation ranges), so expected weights can be computed by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HOST = (100, 100)  # pid, tid of the Python thread
STREAM = (0, 7)  # device 0, stream 7


class KinetoBuilder:
    """Events are added with explicit microsecond times; kernels get their own device timeline."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": HOST[0], "tid": 0, "args": {"name": "python3"}}
        ]
        self._correlation = 1000
        self._external = 1
        self.device_clock = 10_000.0

    def _x(
        self, cat: str, name: str, ts: float, dur: float, where: tuple[int, int], args: dict[str, Any]
    ) -> dict[str, Any]:
        ev = {"ph": "X", "cat": cat, "name": name, "pid": where[0], "tid": where[1], "ts": ts, "dur": dur, "args": args}
        self.events.append(ev)
        return ev

    def range(self, name: str, ts: float, dur: float) -> dict[str, Any]:
        return self._x("user_annotation", name, ts, dur, HOST, {"External id": self._next_external()})

    def gpu_range(self, name: str, ts: float, dur: float) -> dict[str, Any]:
        return self._x("gpu_user_annotation", name, ts, dur, STREAM, {"External id": self._next_external()})

    def op(self, name: str, ts: float, dur: float, args: list[tuple[list[int], str, str]]) -> dict[str, Any]:
        """A cpu_op; args as (dims, Input type, Concrete Inputs) triples in schema order."""
        return self._x(
            "cpu_op",
            name,
            ts,
            dur,
            HOST,
            {
                "External id": self._next_external(),
                "Input Dims": [a[0] for a in args],
                "Input type": [a[1] for a in args],
                "Concrete Inputs": [a[2] for a in args],
            },
        )

    def kernel(
        self,
        name: str,
        dur: float,
        launcher: dict[str, Any] | None,
        link: str = "correlation",
        ts: float | None = None,
        cat: str = "kernel",
    ) -> dict[str, Any]:
        """A kernel of `dur` µs launched from inside `launcher` (a cpu_op), tied to it by `link`:
        'correlation' (a cudaLaunchKernel inside the op), 'external_id', or 'none' (time only)."""
        self._correlation += 1
        args: dict[str, Any] = {"device": 0, "stream": STREAM[1]}
        if link == "correlation":
            assert launcher is not None
            self._x(
                "cuda_runtime",
                "cudaLaunchKernel",
                launcher["ts"] + 0.5,
                0.2,
                HOST,
                {"correlation": self._correlation, "External id": launcher["args"]["External id"]},
            )
            args["correlation"] = self._correlation
        elif link == "external_id":
            assert launcher is not None
            args["External id"] = launcher["args"]["External id"]
        start = self.device_clock if ts is None else ts
        self.device_clock = start + dur + 1.0
        return self._x(cat, name, start, dur, STREAM, args)

    def _next_external(self) -> int:
        self._external += 1
        return self._external

    def write(self, path: Path) -> Path:
        path.write_text(
            json.dumps(
                {
                    "schemaVersion": 1,
                    "deviceProperties": [{"id": 0, "name": "Test GPU"}],
                    "traceEvents": self.events,
                    "traceName": str(path),
                }
            )
        )
        return path


BF16 = "c10::BFloat16"


def rms_norm_args(tokens: int, hidden: int) -> list[tuple[list[int], str, str]]:
    """Arguments of vLLM's _C::rms_norm(out, input, weight, epsilon)."""
    return [([tokens, hidden], BF16, ""), ([tokens, hidden], BF16, ""), ([hidden], BF16, ""), ([], "Scalar", "1e-06")]


def attention_args(seq_lens: list[int], heads: int = 2, dim: int = 64) -> list[tuple[list[int], str, str]]:
    """Arguments of atrex::attention_forward(q, k, v, cu_seqlens_q, cu_seqlens_k)."""
    t, n = sum(seq_lens), len(seq_lens) + 1
    return [([t, heads, dim], BF16, "")] * 3 + [([n], "int", "")] * 2


def paged_args(
    seqs: int, ctx: int, heads: int = 4, kv_heads: int = 2, dim: int = 64, block: int = 16
) -> list[tuple[list[int], str, str]]:
    """Arguments of vLLM's _C::paged_attention_v1(out, query, key_cache, value_cache, num_kv_heads, scale,
    block_tables, seq_lens, block_size, max_seq_len)."""
    blocks = -(-ctx // block)
    pool = seqs * blocks + 16
    return [
        ([seqs, heads, dim], BF16, ""),
        ([seqs, heads, dim], BF16, ""),
        ([pool, kv_heads, dim // 8, block, 8], BF16, ""),
        ([pool, kv_heads, dim, block], BF16, ""),
        ([], "Scalar", str(kv_heads)),
        ([], "Scalar", "0.125"),
        ([seqs, blocks], "int", ""),
        ([seqs], "int", ""),
        ([], "Scalar", str(block)),
        ([], "Scalar", str(ctx)),
    ]


def mm_args(m: int, k: int, n: int) -> list[tuple[list[int], str, str]]:
    return [([m, k], BF16, ""), ([k, n], BF16, "")]


# A torch.compile'd tiny decoder traced on CPU. Compiling it takes one to two minutes on a busy
# two-core machine, so the tests read a recorded copy (COMPILED_TRACE); regenerate it with
#   PYTHONPATH=. python3 tests/trace_fixtures.py
# and `pytest -m slow tests/test_trace_stacks.py` records it afresh and checks the same things.
COMPILED_TRACE = Path(__file__).parent / "fixtures" / "trace" / "compiled_decoder_cpu.json.gz"


def record_compiled_decoder(path: Path) -> Path:
    """Trace the tiny decoder under torch.compile on CPU, with Inductor's C++ kernels named in the
    trace (cpp.enable_kernel_profile: without it they are anonymous time inside the graph call)."""
    import torch
    import torch._inductor.config as inductor_config

    from atrex_mcp.trace import plain_decoder as pd

    cfg = pd.DecoderConfig(
        hidden=64, heads=2, kv_heads=1, intermediate=128, layers=1, vocab=64, batch=1, prompt=24, decode_steps=1
    )
    torch._dynamo.reset()
    with inductor_config.patch({"cpp.enable_kernel_profile": True}):
        model = torch.compile(pd.build(cfg, "cpu"))
        return pd.record(model, cfg, "cpu", path)


if __name__ == "__main__":
    print(record_compiled_decoder(COMPILED_TRACE))
