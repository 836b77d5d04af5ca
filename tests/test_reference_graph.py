"""The judge's reference calls replayed as CUDA graphs (evaluate.reference_graph): on CPU the
judge's path is plain eager; the decision (graph, or eager and why) is driven through the
GraphDevice seam with RerunDevice, whose "replay" reruns the forward, and a timeline standing
in for the clock. The gpu-marked tests capture real graphs of the real references."""

from __future__ import annotations

import contextlib
import gc
import json
import statistics
import time
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from atrex_mcp.evaluate import EvalRequest, evaluator, graph_witness, reference_graph
from atrex_mcp.evaluate.evaluator import Trial
from atrex_mcp.evaluate.reference_graph import (
    EAGER,
    GRAPH,
    CudaGraphDevice,
    GraphPolicy,
    ReferenceGraphs,
    RerunDevice,
    same_bits,
    same_output,
)
from atrex_mcp.problemset.catalog import Catalog
from sandbox import gpu_cache

OPEN = GraphPolicy(min_eager_s=0.0, launch_bound_share=0.0, min_speedup=0.0)  # every gate on time open


@pytest.fixture(autouse=True)
def _no_graphs_of_earlier_tests():
    """pooled_bytes counts every live ReferenceGraphs of the process: earlier tests' are gone."""
    gc.collect()


class Timeline:
    """The clock of a fake device: a forward's host launches, the device's tail after them (paid
    at the synchronisation) and a replay each advance it by what the test says."""

    def __init__(self, host_s: float = 0.01, tail_s: float = 0.0, replay_s: float = 0.001):
        self.now, self.pending = 0.0, 0.0
        self.host_s, self.tail_s, self.replay_s = host_s, tail_s, replay_s

    def __call__(self) -> float:
        return self.now

    def launch(self, seconds: float, tail: float = 0.0) -> None:
        self.now += seconds
        self.pending = max(self.pending, tail)

    def synchronize(self) -> None:
        self.now += self.pending
        self.pending = 0.0


class TimedDevice(RerunDevice):
    """RerunDevice on a Timeline, with knobs for what a GPU may do: fail the capture, replay other
    bits, report a peak allocation, keep a pool."""

    def __init__(self, timeline: Timeline, *, fail_capture: str = "", skew_replay: bool = False, peak: int = 0):
        self.timeline, self.fail_capture, self.skew_replay, self.peak = timeline, fail_capture, skew_replay, peak
        self.captures = self.replays = self.resets = 0

    def synchronize(self) -> None:
        self.timeline.synchronize()

    def peak_bytes(self) -> int:
        return self.peak

    def capture(self, forward):
        self.captures += 1
        if self.fail_capture:
            raise RuntimeError(self.fail_capture)
        device = self

        @dataclass
        class Captured:
            outputs: object
            pool_bytes: int = 4096

            def replay(self) -> None:
                device.replays += 1
                saved = device.timeline.host_s
                device.timeline.host_s = 0.0  # the replay's own time below, not a forward's launches
                fresh = forward()
                device.timeline.host_s = saved
                device.timeline.launch(device.timeline.replay_s)
                for static, new in zip(reference_graph._tensors(self.outputs), reference_graph._tensors(fresh)):
                    static.copy_(new)
                    if device.skew_replay and new.is_floating_point():
                        static.copy_(torch.nextafter(new, torch.full_like(new, float("inf"))))

            def reset(self) -> None:
                device.resets += 1

        return Captured(forward())


class Recurrent(nn.Module):
    """A launch-bound reference in miniature: a loop over tokens of small ops."""

    def __init__(self, timeline: Timeline | None = None):
        super().__init__()
        self.timeline, self.calls = timeline, []

    def forward(self, x: torch.Tensor, w: torch.Tensor, scale: float | list = 1.0) -> dict[str, torch.Tensor]:
        self.calls.append(x)
        scale = scale[0] if isinstance(scale, list) else scale
        if self.timeline is not None:
            self.timeline.launch(self.timeline.host_s, self.timeline.tail_s)
        state = torch.zeros(x.shape[-1])
        out = torch.empty_like(x)
        for t in range(x.shape[0]):
            state = state * 0.5 + x[t] * w
            out[t] = state * scale
        return {"out": out, "state": state}


def _inputs(seed: int, tokens: int = 6) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(tokens, 4, generator=gen), "w": torch.randn(4, generator=gen)}


def _graphs(device=None, policy: GraphPolicy = OPEN, memory: int | None = 1 << 40, timeline=None) -> ReferenceGraphs:
    timeline = timeline or Timeline()
    return ReferenceGraphs(device or TimedDevice(timeline), memory, policy, clock=timeline)


def _only_decision(graphs: ReferenceGraphs):
    (decision,) = graphs.decisions.values()
    return decision


# -- the judge on CPU ---------------------------------------------------------------------------


def test_on_cpu_the_judge_makes_its_references_eagerly_with_no_graph():
    trial = Trial(EvalRequest(op="gated_delta_rule_update", baseline="eager", shapes=["1"]), Catalog(), None, None)
    shape = trial.shapes[0]
    inputs = trial.inputs(shape, 7)
    with torch.no_grad():
        expected = trial.reference(**shape.init).eval()(**inputs)
    assert trial.reference_graphs is None  # no graph is attempted without a GPU
    assert same_output(trial.reference_output(shape, inputs), expected)


# -- the decision, through the seam -------------------------------------------------------------


def test_a_launch_bound_reference_is_replayed_and_gives_eagers_bits_on_every_seed():
    timeline = Timeline(host_s=0.02, replay_s=0.001)
    device, model = TimedDevice(timeline), Recurrent(timeline)
    graphs = _graphs(device, GraphPolicy(), timeline=timeline)  # the default thresholds
    outputs = [graphs.output("s", "m", model, _inputs(seed)) for seed in range(5)]
    decision = _only_decision(graphs)
    assert decision.mode == GRAPH, decision.reason
    assert decision.eager_s == pytest.approx(0.02) and decision.replay_s == pytest.approx(0.001)
    for seed, out in enumerate(outputs):
        with torch.no_grad():
            assert same_output(out, Recurrent()(**_inputs(seed)))
    assert device.captures == 1 and device.replays == 1 + 1 + 4  # the check, the timed check, four seeds
    # after the first call, the forward only ever sees the graph's static inputs, never the caller's
    static = graphs.graphs[next(iter(graphs.graphs))].static["x"]
    assert all(x is static for x in model.calls[1:])
    # each call's output is its own copy: the next replay does not overwrite it
    assert outputs[1]["out"].data_ptr() != outputs[2]["out"].data_ptr()


def test_the_first_call_returns_its_eager_output_as_is():
    model = Recurrent()
    graphs = _graphs()
    inputs = _inputs(0)
    out = graphs.output("s", "m", model, inputs)
    assert model.calls[0] is inputs["x"]  # the caller's tensors, eager
    assert _only_decision(graphs).mode == GRAPH and same_output(out, Recurrent()(**inputs))


def test_a_capture_that_fails_leaves_the_key_eager_and_is_not_tried_again():
    device = TimedDevice(Timeline(), fail_capture="operation not permitted when stream is capturing")
    graphs, model = _graphs(device), Recurrent()
    outputs = [graphs.output("s", "m", model, _inputs(seed)) for seed in range(3)]
    decision = _only_decision(graphs)
    assert decision.mode == EAGER and "not capturable: RuntimeError: operation not permitted" in decision.reason
    assert device.captures == 1 and not graphs.graphs
    assert all(same_output(out, Recurrent()(**_inputs(seed))) for seed, out in enumerate(outputs))
    assert all(x is not None and x.data_ptr() != 0 for x in model.calls[-2:])


def test_a_replay_with_other_bits_leaves_the_key_eager():
    device = TimedDevice(Timeline(), skew_replay=True)
    graphs = _graphs(device)
    outputs = [graphs.output("s", "m", Recurrent(), _inputs(seed)) for seed in range(3)]
    decision = _only_decision(graphs)
    assert decision.mode == EAGER and "replay's bits differ" in decision.reason
    assert device.resets == 1 and not graphs.graphs and reference_graph.pooled_bytes() == 0
    assert all(same_output(out, Recurrent()(**_inputs(seed))) for seed, out in enumerate(outputs))


def test_a_reference_whose_eager_calls_differ_stays_eager():
    class Noisy(Recurrent):
        def forward(self, x, w, scale=1.0):
            out = super().forward(x, w, scale)
            out["out"] = out["out"] + torch.rand(()) * 1e-3  # its own random numbers: not a function of the inputs
            return out

    graphs = _graphs()
    graphs.output("s", "m", Noisy(), _inputs(0))
    decision = _only_decision(graphs)
    assert decision.mode == EAGER and "not deterministic" in decision.reason


@pytest.mark.parametrize(
    ("peak", "memory", "why"),
    [
        (3 << 30, 1 << 40, "peak allocation"),  # over the 2 GiB cap
        (200 << 20, 8 << 30, "peak allocation"),  # over 2 % of an 8 GiB device
        (0, 1000, "inputs of"),  # the inputs alone exceed 2 % of the device: no copy is even made
    ],
)
def test_a_reference_that_needs_too_much_memory_stays_eager(peak, memory, why):
    device = TimedDevice(Timeline(), peak=peak)
    graphs = _graphs(device, memory=memory)
    out = graphs.output("s", "m", Recurrent(), _inputs(0))
    decision = _only_decision(graphs)
    assert decision.mode == EAGER and why in decision.reason and device.captures == 0
    assert same_output(out, Recurrent()(**_inputs(0)))


@pytest.mark.parametrize(
    ("timeline", "why"),
    [
        (Timeline(host_s=0.001), "under 2 ms"),  # too short to save anything
        (Timeline(host_s=0.004, tail_s=0.02), "device-bound"),  # the launches ended long before the work
        (Timeline(host_s=0.004, replay_s=0.003), "not launch-bound"),  # the replay saves too little
    ],
)
def test_a_reference_below_the_time_thresholds_stays_eager(timeline, why):
    device = TimedDevice(timeline)
    graphs = _graphs(device, GraphPolicy(), timeline=timeline)
    graphs.output("s", "m", Recurrent(timeline), _inputs(0))
    decision = _only_decision(graphs)
    assert decision.mode == EAGER and why in decision.reason
    assert device.captures == (1 if why == "not launch-bound" else 0) and device.resets == device.captures


def test_outputs_that_are_not_fresh_tensors_and_forwards_that_write_their_inputs_stay_eager():
    class Aliasing(nn.Module):
        def forward(self, x, w):
            return x.view(-1)

    class Counting(nn.Module):
        def forward(self, x, w):
            return (x * w).sum(), 3

    class InPlace(nn.Module):
        def forward(self, x, w):
            x.mul_(2)
            return x * w

    for model, why in (
        (Aliasing(), "aliases an input"),
        (Counting(), "not a tensor"),
        (InPlace(), "changes its inputs in place"),
    ):
        graphs = _graphs()
        inputs = _inputs(0)
        graphs.output("s", "m", model, inputs)
        assert _only_decision(graphs).mode == EAGER and why in _only_decision(graphs).reason
    assert torch.equal(inputs["x"], _inputs(0)["x"] * 2)  # the caller's input written, as eager does


def test_inputs_a_graph_cannot_take_are_never_tried_and_scalars_are_part_of_the_key():
    graphs, model = _graphs(), Recurrent()
    graphs.output("s", "m", model, {**_inputs(0), "scale": [1.0]})
    assert not graphs.decisions  # a list: eager, no key
    for scale in (1.0, 2.0, 2.0):
        out = graphs.output("s", "m", model, {**_inputs(1), "scale": scale})
        assert same_output(out, Recurrent()(**_inputs(1), scale=scale))
    assert len(graphs.graphs) == 2  # one graph per value baked into a capture


def test_a_strided_input_gets_a_static_copy_of_its_layout():
    graphs, model = _graphs(), Recurrent()
    for seed in range(3):
        wide = torch.randn(6, 8, generator=torch.Generator().manual_seed(seed))
        x = wide[:, 2:6]  # a view: strides (8, 1), offset 2
        out = graphs.output("s", "m", model, {"x": x, "w": torch.ones(4)})
        assert same_output(out, Recurrent()(x, torch.ones(4)))
    static = next(iter(graphs.graphs.values())).static["x"]
    assert static.stride() == (8, 1) and static.storage_offset() == 2


def test_a_shape_tries_at_most_two_layouts():
    device = TimedDevice(Timeline())
    graphs = _graphs(device)
    for tokens in (3, 4, 5, 6):
        graphs.output("s", "m", Recurrent(), _inputs(0, tokens))
    assert device.captures == 2 and len(graphs.graphs) == 2


def test_the_graphs_go_with_the_shape_and_their_pools_count_until_then():
    device = TimedDevice(Timeline())
    graphs = _graphs(device)
    graphs.output("a", "m", Recurrent(), _inputs(0))
    assert reference_graph.pooled_bytes() == 4096
    graphs.output("b", "m", Recurrent(), _inputs(0, tokens=5))  # another shape: the first one's graph goes
    assert device.resets == 1 and len(graphs.graphs) == 1
    graphs.release()
    assert device.resets == 2 and not graphs.graphs and reference_graph.pooled_bytes() == 0


def test_the_evaluator_releases_the_graphs_at_the_end_of_a_shape_even_when_it_fails(monkeypatch):
    trial = Trial(EvalRequest(op="rms_norm", baseline="eager", shapes=["0"]), Catalog(), None, None)
    device = TimedDevice(Timeline())
    trial.reference_graphs = _graphs(device)
    trial.reference_graphs.output("0", "m", Recurrent(), _inputs(0))

    def stopped(session, shape, index):
        raise RuntimeError("stopped")

    monkeypatch.setattr(trial, "_evaluate_shape", stopped)
    with pytest.raises(RuntimeError, match="stopped"):
        trial.evaluate_shape(None, trial.shapes[0], 0)
    assert device.resets == 1 and not trial.reference_graphs.graphs


def test_the_judges_cache_release_and_fragmentation_check_leave_the_graph_pools_out(monkeypatch):
    graphs = _graphs()
    graphs.output("s", "m", Recurrent(), _inputs(0))  # a pool of 4096 bytes
    kept: list[int] = []
    monkeypatch.setattr(gpu_cache, "release", lambda keep_bytes=gpu_cache.KEEP_BYTES: kept.append(keep_bytes))
    evaluator._release_cached_gpu_memory()
    assert kept == [gpu_cache.KEEP_BYTES + 4096]
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: 0)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: evaluator.PINNED_SLACK_BYTES + 4096)
    assert evaluator._cache_pins_memory() is False  # pinned only by the pool, which is held on purpose
    graphs.release()
    assert evaluator._cache_pins_memory() is True


class FailingCapture:
    """torch.cuda's capture on CPU: the capture raises, as one a host synchronisation invalidated
    does on a GPU (torch's capture_end then raises before it ends the allocator's routing into
    the graph's pool), and the judge's steps after it are noted in order."""

    def __init__(self, monkeypatch, fails: bool = True):
        self.steps: list = []
        self.pool = (0, 42)
        current = SimpleNamespace(wait_stream=lambda other: None)
        cuda = torch.cuda

        @contextlib.contextmanager
        def graph(g, pool=None, stream=None, capture_error_mode="global"):
            self.steps.append(("capture", pool))
            yield
            if fails:
                raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

        for name, fake in {
            "CUDAGraph": lambda: SimpleNamespace(reset=lambda: self.steps.append("reset"), replay=lambda: None),
            "graph_pool_handle": lambda: self.pool,
            "graph": graph,
            "current_stream": lambda: current,
            "set_stream": lambda stream: self.steps.append(("set_stream", stream is current)),
            "Stream": lambda: SimpleNamespace(wait_stream=lambda other: None),
            "stream": lambda stream: contextlib.nullcontext(),
            "synchronize": lambda: None,
            "empty_cache": lambda: None,
            "memory_reserved": lambda: 0,
        }.items():
            monkeypatch.setattr(cuda, name, fake)
        monkeypatch.setattr(gpu_cache, "end_failed_capture", lambda pool: self.steps.append(("end", pool)) or True)


def test_a_failed_capture_ends_the_allocators_routing_into_its_pool_before_the_graph_goes(monkeypatch):
    """Without that, torch's caching allocator takes a capture to be underway for the rest of the
    process and no later cache release of the judge hands anything back (gpu_cache.end_failed_capture)."""
    capture = FailingCapture(monkeypatch)

    def synchronising_forward():
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    with pytest.raises(RuntimeError, match="not permitted when stream is capturing"):
        CudaGraphDevice().capture(synchronising_forward)
    pool = capture.pool
    assert capture.steps == [("capture", pool), ("end", pool), ("set_stream", True), "reset"]


def test_a_capture_that_succeeds_leaves_the_routing_to_torch(monkeypatch):
    capture = FailingCapture(monkeypatch, fails=False)
    captured = CudaGraphDevice().capture(lambda: torch.ones(2))
    assert capture.steps == [("capture", capture.pool)] and same_bits(captured.outputs, torch.ones(2))


def test_the_witness_fingerprint_calibration_ends_its_failed_capture_too_and_times_eagerly(monkeypatch):
    capture = FailingCapture(monkeypatch)
    calls: list[bool] = []
    monkeypatch.setattr(graph_witness, "empty_prints", lambda *args: None)
    monkeypatch.setattr(graph_witness, "fingerprints_into", lambda outputs, prints: calls.append(True))
    assert graph_witness.fingerprints_s(torch.ones(4), 3) >= 0.0
    pool = capture.pool
    assert capture.steps == [("capture", pool), ("end", pool), ("set_stream", True)]
    assert len(calls) == 3  # before the capture, in it, then the eager fallback the judge times


def test_bits_are_compared_byte_for_byte():
    nan = torch.tensor([float("nan"), 1.0])
    assert same_bits(nan, nan.clone())  # NaNs of one payload match, where torch.equal says no
    assert not torch.equal(nan, nan.clone())
    assert not same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert not same_bits(torch.tensor([1.0]), torch.tensor([1.0], dtype=torch.float64))
    assert not same_output({"a": torch.ones(1)}, {"b": torch.ones(1)})


# -- on the GPU ---------------------------------------------------------------------------------


def _gdr_trial(shape_id: str = "2") -> Trial:
    return Trial(EvalRequest(op="gated_delta_rule_update", baseline="eager", shapes=[shape_id]), Catalog(), None, None)


def _synced_s(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


@pytest.mark.gpu
def test_gpu_the_recurrent_reference_replays_eagers_bits_several_times_faster():
    trial = _gdr_trial("2")  # token_count 258: ~1,500 launches a call
    shape = trial.shapes[0]
    model = trial.reference(**shape.init).to("cuda").eval()
    eager_s, graph_s = [], []
    with torch.no_grad():
        for seed in range(6):
            inputs = trial.inputs(shape, seed)
            expected = model(**inputs)
            assert same_output(trial.reference_output(shape, inputs), expected), f"seed {seed}"
            if seed:  # past the first call, which captures
                eager_s.append(_synced_s(lambda inputs=inputs: model(**inputs)))
                graph_s.append(_synced_s(lambda inputs=inputs: trial.reference_output(shape, inputs)))
    decision = next(iter(trial.reference_graphs.decisions.values()))
    assert decision.mode == GRAPH, decision.reason
    assert statistics.median(eager_s) > 3 * statistics.median(graph_s), (eager_s, graph_s)
    trial.reference_graphs.release()


@pytest.mark.gpu
def test_gpu_a_reference_that_synchronises_stays_eager_and_the_device_still_works():
    class Item(nn.Module):
        def forward(self, x):
            for _ in range(1000):  # launch-bound (well over 2 ms), and then a host synchronisation
                x = x * 0.999 + 0.001
            return x * float(x.abs().max().item())

    graphs = ReferenceGraphs(CudaGraphDevice(), torch.cuda.get_device_properties(0).total_memory)
    stream = torch.cuda.current_stream()
    model = Item()
    with torch.no_grad():
        for seed in range(3):
            x = torch.randn(1024, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
            assert same_bits(graphs.output("s", "m", model, {"x": x}), model(x))
    decision = next(iter(graphs.decisions.values()))
    assert decision.mode == EAGER and "not capturable" in decision.reason
    assert torch.cuda.current_stream() == stream and not graphs.graphs
    assert (torch.ones(4, device="cuda") * 2).sum().item() == 8.0


@pytest.mark.gpu
def test_gpu_after_a_capture_that_fails_the_judges_cache_still_goes_back():
    """A reference that synchronises fails its capture; the cache the judge fills afterwards must
    still go back to the driver at its next release, or the worker sharing the GPU runs short."""

    class Item(nn.Module):
        def forward(self, x):
            for _ in range(1000):
                x = x * 0.999 + 0.001
            return x * float(x.abs().max().item())

    gpu_cache.limit_block_splitting()
    graphs = ReferenceGraphs(CudaGraphDevice(), torch.cuda.get_device_properties(0).total_memory)
    with torch.no_grad():
        x = torch.randn(1024, device="cuda")
        graphs.output("s", "m", Item(), {"x": x})
    assert "not capturable" in next(iter(graphs.decisions.values())).reason
    graphs.release()
    block = 300 << 20
    torch.empty(block, dtype=torch.uint8, device="cuda")  # freed at once: a cached block
    cached = torch.cuda.memory_reserved()
    assert gpu_cache.release(keep_bytes=0)
    assert torch.cuda.memory_reserved() <= cached - block


@pytest.mark.gpu
def test_gpu_the_graphs_are_released_after_the_shape():
    trial = _gdr_trial("2")
    shape = trial.shapes[0]
    trial.reference_output(shape, trial.inputs(shape, 1))
    assert reference_graph.pooled_bytes() > 0 and trial.reference_graphs.graphs
    reserved = torch.cuda.memory_reserved()

    def judged(session, shape, index):  # the shape's stages, here only its references
        for seed in range(3):
            trial.reference_output(shape, trial.inputs(shape, seed))

    trial._evaluate_shape = judged
    trial.evaluate_shape(None, shape, 0)
    assert reference_graph.pooled_bytes() == 0 and not trial.reference_graphs.graphs
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() < reserved  # the pool went back to the driver


def test_the_measurement_script_dry_runs_on_cpu(tmp_path):
    from measurements import reference_graph_gpu

    ops = "gated_delta_rule_update,per_token_group_quant_fp8"
    assert reference_graph_gpu.main(["--out", str(tmp_path), "--ops", ops, "--shapes", "smoke", "--seeds", "2"]) == 0
    (json_file,) = tmp_path.glob("*.json")
    report = json.loads(json_file.read_text())
    assert [r["op"] for r in report["rows"]] == ops.split(",") and report["all_identical"] is True
    assert all(r["mode"] == GRAPH and r["identical"] for r in report["rows"])  # the dry run's open gates
    assert "| gated_delta_rule_update | smoke | graph | True |" in json_file.with_suffix(".md").read_text()


@pytest.mark.gpu
def test_gpu_the_eager_baseline_passes_every_stage_with_graphed_references():
    trial = Trial(
        EvalRequest(op="gated_delta_rule_update", baseline="eager", shapes=["2", "3"], seeds=5, measure_dsl=False),
        Catalog(),
        None,
        None,
    )
    graphs = trial.reference_graphs
    modes: list[str] = []
    release = graphs.release

    def noted_release() -> None:
        modes.extend(d.mode for d in graphs.decisions.values())
        release()

    graphs.release = noted_release
    result = trial.run()
    assert [s.correct for s in result.shapes] == [True, True], [s.message for s in result.shapes]
    assert GRAPH in modes  # the judge's references of these shapes were replayed
    assert not graphs.graphs and reference_graph.pooled_bytes() == 0
