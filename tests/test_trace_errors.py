"""A malformed, truncated or unusable trace gives a clear AtrexError and leaves no snapshot behind."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from atrex_mcp.errors import AtrexError
from atrex_mcp.trace import TraceSpec, import_traces
from atrex_mcp.trace import snapshot as snapshot_module
from tests.trace_fixtures import KinetoBuilder, mm_args, rms_norm_args


def good_trace(path: Path) -> Path:
    b = KinetoBuilder()
    b.range("prefill", 0, 500)
    b.kernel("void vllm::rms_norm_kernel<float>(...)", 30, b.op("_C::rms_norm", 10, 50, rms_norm_args(100, 64)))
    b.kernel("gemm", 20, b.op("aten::mm", 100, 50, mm_args(100, 64, 64)))
    return b.write(path)


def assert_nothing_written(parent: Path, name: str) -> None:
    assert not (parent / name).exists()
    assert [p.name for p in parent.iterdir() if p.name.startswith(f".{name}")] == []


def import_error(tmp_path: Path, *traces: Path, **kwargs) -> AtrexError:
    with pytest.raises(AtrexError) as err:
        import_traces([TraceSpec("chat", t) for t in traces], tmp_path / "snap", **kwargs)
    assert_nothing_written(tmp_path, "snap")
    return err.value


def test_truncated_trace(tmp_path):
    text = good_trace(tmp_path / "good.json").read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    err = import_error(tmp_path, good_trace(tmp_path / "other.json"), cut)  # a good trace first: still nothing
    assert err.info.category == "bad_trace"
    assert "cut.json" in err.info.message and "truncated" in err.info.message
    assert "export_chrome_trace" in err.info.hint


def test_truncated_gzip_trace(tmp_path):
    data = gzip.compress(good_trace(tmp_path / "good.json").read_bytes())
    (tmp_path / "cut.json.gz").write_bytes(data[: len(data) - 20])
    assert "gzip" in import_error(tmp_path, tmp_path / "cut.json.gz").info.message


def test_gzip_trace_is_read(tmp_path):
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(good_trace(tmp_path / "good.json").read_bytes()))
    manifest = import_traces([TraceSpec("chat", gz)], tmp_path / "snap")
    assert manifest.operators["rms_norm"].retained


@pytest.mark.parametrize(
    "document, fragment",
    [
        ({"traceEvents": "nope"}, "no 'traceEvents' list"),
        ({"schemaVersion": 1}, "no 'traceEvents' list"),
        ({"traceEvents": [3]}, "event 0 is a int"),
        (
            {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 1}]},
            "event 0 (kernel) lacks",
        ),
        (
            {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.0, "dur": -5}]},
            "non-negative 'dur'",
        ),
        ({"traceEvents": [{"ph": "M", "name": "process_name", "args": {}}]}, "no operator or kernel events"),
    ],
)
def test_structurally_bad_traces(tmp_path, document, fragment):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    err = import_error(tmp_path, path)
    assert err.info.stage == "input" and err.info.category == "bad_trace"
    assert fragment in err.info.message


def test_not_json_and_missing_file(tmp_path):
    (tmp_path / "bin.json").write_bytes(b"\x80\x81 garbage")
    assert "UTF-8" in import_error(tmp_path, tmp_path / "bin.json").info.message
    (tmp_path / "text.json").write_text("{'single': 'quotes'}")
    assert "is not valid JSON" in import_error(tmp_path, tmp_path / "text.json").info.message
    assert "Cannot read trace" in import_error(tmp_path, tmp_path / "absent.json").info.message


def test_existing_output_is_refused(tmp_path):
    (tmp_path / "snap").mkdir()
    with pytest.raises(AtrexError) as err:
        import_traces([TraceSpec("chat", good_trace(tmp_path / "t.json"))], tmp_path / "snap")
    assert err.value.info.category == "snapshot_exists"


def test_cpu_and_gpu_traces_are_not_mixed(tmp_path):
    cpu = tmp_path / "cpu.json"
    cpu.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": "aten::mm",
                        "ts": 1.0,
                        "dur": 5.0,
                        "pid": 1,
                        "tid": 1,
                        "args": {},
                    }
                ]
            }
        )
    )
    err = import_error(tmp_path, good_trace(tmp_path / "gpu.json"), cpu)
    assert err.info.category == "mixed_devices" and "cpu.json" in err.info.message


def test_failure_while_writing_leaves_nothing(tmp_path, monkeypatch):
    written: list[str] = []
    real = Path.write_text

    def failing(self, text, *args, **kwargs):
        written.append(self.name)
        if len(written) == 3:
            raise OSError(28, "No space left on device")
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(snapshot_module.Path, "write_text", failing)
    with pytest.raises(OSError):
        import_traces([TraceSpec("chat", good_trace(tmp_path / "t.json"))], tmp_path / "snap")
    assert len(written) == 3
    assert_nothing_written(tmp_path, "snap")
