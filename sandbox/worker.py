"""The sandbox worker: the only process that executes candidate code.

Started by sandbox.launcher as `python -I -B -c <bootstrap> CONFIG`, in its own session, in
a scratch directory that holds the candidate and the visible problem files. It imports what
it needs, captures the timing primitives, restricts itself (sandbox.isolation), and only
then imports the candidate. It answers requests on a pipe; outputs go out as raw bytes in the
output arena the trusted side shares with it (sandbox.handoff). It never sees a reference
output, a roofline or a score: every verdict is made by the trusted side from what this process
hands over.

The request handlers, the timing loop and the reply writer are bound before the candidate is
imported: `serve` builds its handler table and holds `protocol.send`/`receive` as defaults,
and the handlers that time (`time`, `burst`, `graph_capture`, `graph_replay`) hold the loop and
what it calls as default arguments, so rewriting `sandbox.worker.time_calls`, `sys.modules[...]`, `time.perf_counter`,
`statistics.median` or `protocol.send` after the import changes nothing that is measured or
sent (and `replaced()` reports it). The candidate still shares this process: what it could do
beyond attribute rewriting, and why the judge does not have to trust it, is in
docs/threat-model.md.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sandbox import gpu_cache, graph_burst, isolation, protocol
from sandbox.handoff import MAX_OUTPUT_TENSORS, ArenaWriter, output_items
from sandbox.timing import (
    Primitives,
    digest,
    fit_calls_to_sets,
    host_primitives,
    input_checksums,
    plan_calls,
    poison,
    storages,
    time_calls,
    warm_clocks,
)

if TYPE_CHECKING:  # the message types, for the annotations only: building a dozen classes costs start-up time
    from collections.abc import Mapping

    from sandbox import messages

PRIMS = Primitives.capture()  # before anything else can run in this process
LOOP_NAMES = (
    "torch.cuda.Event",
    "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time",
    "torch.cuda.synchronize",
    "time.perf_counter",
    "torch.cuda._sleep",
)


def _loop_primitives(prims: Primitives) -> dict[str, Any]:
    """What the timing loop calls, as a plain dict held only by the handlers' defaults: read
    through dict's own lookup, not through a method or a module name the candidate could reassign."""
    return {name: prims[name] for name in LOOP_NAMES if name in prims.bound or name in prims.snapshot}


class Failure(Exception):
    """A failure this worker has already classified (stage/category of the taxonomy)."""

    def __init__(self, stage: str, category: str, message: str):
        super().__init__(message)
        self.stage, self.category, self.message = stage, category, message


def _error_payload(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, Failure):
        return {"stage": exc.stage, "category": exc.category, "type": "", "message": exc.message, "traceback": ""}
    kind = type(exc)
    return {
        "stage": None,
        "category": None,
        "type": f"{kind.__module__}.{kind.__qualname__}",
        "message": str(exc)[:4000],
        "traceback": "".join(traceback.format_exception(exc, limit=-12))[-6000:],
    }


def _check_output(value: Any, device: str) -> None:
    """An output must be plain tensors on the inputs' device; anything else is a structure failure."""
    if isinstance(value, dict) and not all(isinstance(k, str) for k in value):
        raise Failure("runtime", "wrong_output_type", "Output dict keys must be strings.")
    _, items = output_items(value)
    if not 1 <= len(items) <= MAX_OUTPUT_TENSORS:
        raise Failure(
            "runtime", "wrong_output_type", f"Output holds {len(items)} tensors; return 1 to {MAX_OUTPUT_TENSORS}."
        )
    for _, t in items:
        if type(t) is not torch.Tensor:
            raise Failure(
                "runtime",
                "wrong_output_type",
                f"Output holds a {type(t).__module__}.{type(t).__qualname__}; return plain torch.Tensor objects "
                "(a tensor, a tuple or a dict of tensors).",
            )
        if t.device.type != device:
            raise Failure(
                "runtime",
                "wrong_output_type",
                f"Output is on {t.device}, the inputs on {device}; return it where the inputs are.",
            )


def _import_toolchain() -> dict[str, Any]:
    """Import the DSL and the tools the requests use before the sandbox closes (like torch),
    and before `init`, so a worker spawned ahead has done it; returns their versions."""
    versions: dict[str, str | None] = {"python": sys.version.split()[0], "torch": torch.__version__}
    try:
        import triton
        import triton.language

        versions["triton"] = triton.__version__
    except ImportError:
        versions["triton"] = None
    for name in ("torch.profiler", "torch.testing"):
        importlib.import_module(name)
    return versions


def _warm_profiler() -> None:
    """Open and close an empty CUDA profiler session: its first use in a process sets up CUPTI
    (about 4 s on the H200, measurements/worker_start_cost.py), the next costs milliseconds.
    This creates the CUDA context."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
        pass


def _warm_triton_driver() -> None:
    """Set up Triton's CUDA driver: on first use it builds its C helper module with the system
    compiler into TRITON_CACHE_DIR (the scratch directory's, fresh for each evaluation), which the
    first kernel launch would otherwise pay. No CUDA context is created."""
    import triton.runtime

    triton.runtime.driver.active.utils  # noqa: B018 — the attribute's first read builds the driver


WARM_STEPS: dict[str, Callable[[], None]] = {"triton_driver": _warm_triton_driver, "profiler": _warm_profiler}


def warm_up(steps: list[str]) -> None:
    """The set-up a worker spawned ahead does while it waits (sandbox.launcher.LaunchSpec.warm),
    on a GPU only. A step that fails is left to the request that needs it to report."""
    if not steps or not torch.cuda.is_available():
        return
    for step in steps:
        try:
            WARM_STEPS[step]()
        except Exception:  # noqa: BLE001 — the request that needs the step reports what is wrong
            pass


def _input_bytes(inputs: dict[str, Any]) -> int:
    return sum(t.numel() * t.element_size() for t in inputs.values() if isinstance(t, torch.Tensor))


class Worker:
    def __init__(self, config: dict[str, Any]):
        self.req_fd, self.resp_fd = config["req_fd"], config["resp_fd"]
        self.scratch = Path.cwd()
        self.output_fd: int | None = config.get("output_fd")
        self.writer = ArenaWriter(self.output_fd, cuda=False)  # until init names the device
        self.device = "cpu"
        self.make_inputs: Callable[..., dict[str, Any]] | None = None  # the problem's input.py, set by init
        self.model_cls: type[torch.nn.Module] | None = None  # the candidate's Model, set by load
        self.models: dict[str, Any] = {}
        self.kept: dict[int, Any] = {}
        self.burst_kept: dict[int, Any] = {}
        self.graph: graph_burst.GraphBurst | None = None  # the captured graph burst, until `keep` with burst_done
        self.ran: set[str] = set()  # shapes whose forward has run in this process (run, time)
        self.versions = _import_toolchain()
        warm_up(config.get("warm") or [])

    # -- requests ---------------------------------------------------------------------------
    def init(self, msg: messages.Wire) -> messages.InitReply:
        t0 = time.perf_counter()
        self.device = msg["device"]
        self.writer = ArenaWriter(self.output_fd, cuda=self.device == "cuda")
        info: dict[str, Any] = {}
        cuda_s = 0.0
        if self.device == "cuda":
            c0 = time.perf_counter()
            torch.cuda.init()
            gpu_cache.limit_block_splitting()
            torch.empty(1, device="cuda").zero_()
            PRIMS["torch.cuda.synchronize"]()
            cuda_s = time.perf_counter() - c0
            props = torch.cuda.get_device_properties(0)
            info = {"name": props.name, "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0)}
        spec = importlib.util.spec_from_file_location("problem_input", self.scratch / msg["input_file"])
        assert spec is not None and spec.loader is not None, "a .py path always has a source loader"
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        self.make_inputs = module.make_inputs
        rules = dict(msg["landlock"])
        rules[f"/proc/{os.readlink('/proc/self')}"] = msg[
            "proc_self_rights"
        ]  # the pid procfs knows, even in a PID namespace
        report = isolation.enter(
            msg["rlimits"],
            rules if msg.get("use_landlock", True) else None,
            tcp_ports=msg.get("tcp_ports", []),
            abstract_unix=msg.get("abstract_unix", False),
        )
        return {
            "isolation": isolation.as_dict(report),
            "versions": self.versions,
            "device": info,
            "cuda_init_s": cuda_s,
            "init_s": time.perf_counter() - t0,
        }

    def load(self, msg: messages.Wire) -> messages.LoadReply:
        t0 = time.perf_counter()
        path = self.scratch / msg["candidate_file"]
        source = path.read_text()
        try:
            compile(source, str(path), "exec")
        except (SyntaxError, ValueError) as exc:
            raise Failure("compile", "syntax_error", f"{type(exc).__name__}: {exc}") from None
        sys.path.insert(0, str(self.scratch))
        spec = importlib.util.spec_from_file_location("candidate", path)
        assert spec is not None and spec.loader is not None, "a .py path always has a source loader"
        module = importlib.util.module_from_spec(spec)
        sys.modules["candidate"] = module
        try:
            spec.loader.exec_module(module)
        except MemoryError:
            raise Failure("compile", "compile_oom", "Importing the candidate ran out of memory.") from None
        except BaseException as exc:  # noqa: BLE001 — anything the import raises is the candidate's failure
            raise Failure(
                "compile",
                "import_error",
                f"{type(exc).__name__}: {exc}\n" + "".join(traceback.format_exception(exc, limit=-8))[-4000:],
            ) from None
        model = getattr(module, "Model", None)
        if model is None:
            raise Failure("compile", "no_model", "The candidate file defines no `Model`.")
        if not (isinstance(model, type) and issubclass(model, torch.nn.Module)):
            raise Failure(
                "compile", "not_nn_module", f"`Model` is a {type(model).__name__}, not a torch.nn.Module subclass."
            )
        self._check_signature(model, msg["init_sets"], msg["forward_params"])
        self.model_cls = model
        return {"load_s": time.perf_counter() - t0}

    @staticmethod
    def _check_signature(
        model: type[torch.nn.Module], init_sets: list[dict[str, Any]], forward_params: list[str]
    ) -> None:
        try:
            init_sig = inspect.signature(model)
            forward_sig = inspect.signature(model.forward)
        except (TypeError, ValueError) as exc:
            raise Failure("compile", "signature_mismatch", f"Cannot read Model's signature: {exc}") from None
        for init in init_sets:
            try:
                init_sig.bind(**init)
            except TypeError as exc:
                raise Failure(
                    "compile",
                    "signature_mismatch",
                    f"Model(**{init}) does not bind: {exc}. Keep the reference's __init__ parameters.",
                ) from None
        try:
            forward_sig.bind(None, **{name: None for name in forward_params})
        except TypeError as exc:
            raise Failure(
                "compile",
                "signature_mismatch",
                f"forward({', '.join(forward_params)}) does not bind: {exc}. Keep the reference's forward inputs.",
            ) from None

    def _model(self, shape: dict[str, Any]) -> Any:
        key = json.dumps(shape["init"], sort_keys=True)
        if key not in self.models:
            assert self.model_cls is not None, "load comes before any request that builds the model"
            model = self.model_cls(**shape["init"])
            if self.device == "cuda":
                model = model.to("cuda")
            self.models[key] = model.eval()
        return self.models[key]

    def _inputs(self, shape: dict[str, Any], seed: int) -> dict[str, Any]:
        assert self.make_inputs is not None, "init comes before any request that makes inputs"
        return self.make_inputs(seed=seed, device=self.device, **shape["inputs"])

    def _release_cache(self) -> None:
        """Give cached GPU blocks back, past the little a process keeps (sandbox.gpu_cache): the
        trusted side compares next, on the same GPU."""
        if self.device == "cuda":
            gpu_cache.release()

    def _sync(self) -> None:
        if self.device == "cuda":
            PRIMS["torch.cuda.synchronize"]()

    def run(self, msg: messages.Wire) -> messages.RunReply:
        """One correctness call on the input set of `seed`; its output goes into the arena.
        The trusted side asks seed by seed, judging each output before the next call."""
        shape = msg["shape"]
        model = self._model(shape)
        inputs = self._inputs(shape, msg["seed"])
        checksums, input_bytes = input_checksums(inputs), _input_bytes(inputs)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model(**inputs)
        self._sync()
        seconds = time.perf_counter() - t0
        self.ran.add(shape["id"])
        _check_output(out, self.device)
        manifest = self.writer.write(out, msg["arena_bytes"])
        poison(out, storages(inputs))
        del out, inputs
        self._release_cache()
        return {"output": manifest, "checksums": checksums, "call_s": seconds, "input_bytes": input_bytes}

    def time(
        self,
        msg: messages.Wire,
        *,
        _time_calls: Any = time_calls,
        _plan: Any = plan_calls,
        _fit: Any = fit_calls_to_sets,
        _poison: Any = poison,
        _storages: Any = storages,
        _replaced: Any = PRIMS.replaced,
        _no_grad: Any = torch.no_grad,
        _cuda: dict[str, Any] = _loop_primitives(PRIMS),
        _host: dict[str, Any] = _loop_primitives(host_primitives()),
    ) -> messages.TimeReply:
        prims = _cuda if self.device == "cuda" else _host
        shape = msg["shape"]
        model = self._model(shape)
        warm = self._inputs(shape, msg["warmup_seed"])
        sets = [self._inputs(shape, s) for s in msg["seeds"]]

        def fn(inputs: dict[str, Any]) -> Any:
            return model(**inputs)

        Event, record = prims["torch.cuda.Event"], prims["torch.cuda.Event.record"]
        elapsed = prims["torch.cuda.Event.elapsed_time"]
        start, end = Event(enable_timing=True), Event(enable_timing=True)
        with _no_grad():  # around the whole run, so no context manager is entered inside a timed call
            _poison(fn(warm), _storages(warm))
            record(start)
            _poison(fn(warm), _storages(warm))
            record(end)
            prims["torch.cuda.synchronize"]()
            plan = _plan(elapsed(start, end), minimum=msg["min_calls"], maximum=msg["max_calls"])
            calls = _fit(plan.calls, len(sets), plan.long) if msg.get("fit_to_sets") else plan.calls
            stop = msg.get("stop_relative")
            run = _time_calls(
                prims,
                fn,
                warm,
                sets,
                calls,
                plan.warmup,
                msg["flush_bytes"],
                stop_relative=float(stop) if stop else None,
                stop_after=plan.first_check,
                stop_every=plan.check_every,
            )
        self.kept = run.kept
        self.ran.add(shape["id"])
        return {
            "times_ms": run.times_ms,
            "synced_ms": run.synced_ms,
            "noop_gap_ms": run.noop_gap_ms,
            "wall_s": run.wall_s,
            "calls": len(run.times_ms),
            "planned_calls": calls,
            "warmup": run.warmup_calls,
            "kept": sorted(run.kept),
            "digests": run.digests,
            "spin_us": run.spin_us,
            "host_us": run.host_us,
            "replaced": _replaced(),
        }

    def burst(
        self,
        msg: dict[str, Any],
        *,
        _digest: Any = digest,
        _no_grad: Any = torch.no_grad,
        _cuda: dict[str, Any] = _loop_primitives(PRIMS),
        _host: dict[str, Any] = _loop_primitives(host_primitives()),
    ) -> dict[str, Any]:
        """The judge's witness: input sets made from fresh `seeds`, then one forward on each back
        to back, nothing between them, one synchronisation at the end, and each output's digest.
        The judge times this whole request with its own clock (atrex_mcp.evaluate.timing_witness);
        the outputs stay here for `fetch` with `burst: true`."""
        sync = (_cuda if self.device == "cuda" else _host)["torch.cuda.synchronize"]
        shape = msg["shape"]
        model = self._model(shape)
        sets = [self._inputs(shape, s) for s in msg["seeds"]]
        with _no_grad():
            outs = [model(**inputs) for inputs in sets]
        sync()
        digests = [[int(v) for v in _digest(out).tolist()] for out in outs]
        self.burst_kept = dict(enumerate(outs))
        return {"digests": digests}

    def graph_capture(
        self,
        msg: messages.Wire,
        *,
        _capture: Any = graph_burst.capture,
        _stack: Any = graph_burst.StackedInputs.stack,
        _cuda: dict[str, Any] = _loop_primitives(PRIMS),
    ) -> messages.GraphCaptureReply:
        """The graph burst's capture (sandbox.graph_burst), untimed: input sets from `seeds`, their
        floating-point inputs in one buffer per input for the replay's refresh, one forward each
        in one CUDA graph. Not capturable: `captured` false and the reason."""
        self._drop_graph()
        shape = msg["shape"]
        model = self._model(shape)
        if self.device != "cuda":  # no graph to capture: no K input sets to make either
            return {"captured": False, "reason": "no CUDA graphs on this device"}
        inputs = _stack(lambda seed: self._inputs(shape, seed), msg["seeds"])
        captured = _capture(model, inputs, self.device, sync=_cuda.get("torch.cuda.synchronize"))
        if isinstance(captured, str):
            del inputs
            self._release_cache()
            return {"captured": False, "reason": captured}
        self.graph = captured
        return {"captured": True}

    def graph_replay(
        self, msg: messages.Wire, *, _replay: Any = graph_burst.replay, _cuda: dict[str, Any] = _loop_primitives(PRIMS)
    ) -> messages.GraphReplayReply:
        """The graph burst's timed window: the inputs refreshed from the request's `seed` (they
        are not known before it), one replay, its synchronisation, its fingerprints."""
        if self.graph is None:
            raise Failure("runtime", "exception", "No graph burst was captured.")
        seed = msg.get("seed")
        if type(seed) is not int:
            raise Failure("runtime", "exception", "A graph replay needs an integer refresh seed.")
        return {"digests": _replay(self.graph, seed, sync=_cuda["torch.cuda.synchronize"])}

    def _drop_graph(self) -> None:
        if self.graph is not None:
            self.graph.release()
            self.graph = None

    def keep(self, msg: messages.Wire) -> messages.EmptyReply:
        """Drop every kept timed output but those of `sets` (all of them for an empty list):
        the trusted side says which it will fetch before it makes their reference outputs.
        With `burst_done`, drop the witness bursts' outputs instead."""
        if msg.get("burst_done"):  # the witness bursts' outputs only
            self.burst_kept = {}
            self._drop_graph()
            self._release_cache()
            return {}
        dropped = [index for index in self.kept if index not in msg["sets"]]
        for index in dropped:
            poison(self.kept.pop(index), set())
        self._release_cache()
        return {}

    def fetch(self, msg: messages.Wire) -> messages.FetchReply:
        """Hand over the kept output of one timed input set (none if it was not kept)."""
        if msg.get("graph"):
            outputs = self.graph.outputs if self.graph is not None else []
            kept = outputs[msg["set"]] if 0 <= msg["set"] < len(outputs) else None
        else:
            kept = (self.burst_kept if msg.get("burst") else self.kept).get(msg["set"])
        if kept is None:
            return {"output": None}
        _check_output(kept, self.device)
        return {"output": self.writer.write(kept, msg["arena_bytes"])}

    def profile(self, msg: messages.Wire, *, _replaced: Any = PRIMS.replaced) -> messages.ProfileReply:
        """One forward under the profiler: device time per kernel name. A shape this process has
        not run yet gets an untimed forward first, so no JIT compilation or autotuning is profiled."""
        shape = msg["shape"]
        model = self._model(shape)
        inputs = self._inputs(shape, msg["seed"])
        if shape["id"] not in self.ran:
            with torch.no_grad():
                model(**inputs)
            self._sync()
        profile = PRIMS["torch.profiler.profile"]
        activity = torch.profiler.ProfilerActivity.CUDA
        with profile(activities=[activity]) as prof:
            with torch.no_grad():
                model(**inputs)
            self._sync()
        trace = self.scratch / "tmp" / f"trace_{os.urandom(8).hex()}.json"
        prof.export_chrome_trace(str(trace))
        kernels: dict[str, messages.KernelEntry] = {}
        for event in json.loads(trace.read_text()).get("traceEvents", []):
            if event.get("ph") == "X" and event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                name = str(event.get("name"))
                entry = kernels.setdefault(name, {"name": name, "time_us": 0.0, "count": 0, "kind": event["cat"]})
                entry["time_us"] += float(event.get("dur", 0.0))
                entry["count"] += 1
        trace.unlink(missing_ok=True)
        return {"kernels": list(kernels.values()), "replaced": _replaced()}

    def forwards(self, msg: messages.Wire, *, _replaced: Any = PRIMS.replaced) -> messages.ForwardsReply:
        """`calls` forwards on one input set for an outside profiler, each in the NVTX range
        `nvtx` when one is named; nothing is saved or compared."""
        shape = msg["shape"]
        model = self._model(shape)
        inputs = self._inputs(shape, msg["seed"])
        nvtx = msg.get("nvtx") if self.device == "cuda" else None
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(int(msg["calls"])):
                if nvtx:
                    torch.cuda.nvtx.range_push(nvtx)
                out = model(**inputs)
                if nvtx:
                    torch.cuda.nvtx.range_pop()
                poison(out, storages(inputs))  # outside the range: the harness's fill is not the forward's
                del out
        self._sync()
        return {"calls": int(msg["calls"]), "seconds": time.perf_counter() - t0, "replaced": _replaced()}

    def integrity(self, msg: messages.Wire, *, _replaced: Any = PRIMS.replaced) -> messages.IntegrityReply:
        return {"replaced": _replaced()}

    # -- loop -------------------------------------------------------------------------------
    def ping(self, msg: messages.Wire) -> messages.EmptyReply:
        """Nothing: the judge times a round trip to calibrate its witness."""
        return {}

    def warm(self, msg: messages.Wire, *, _warm: Any = warm_clocks) -> messages.EmptyReply:
        """The GPU busy in this context for the request's `seconds`, untimed, before a request
        the judge times (sandbox.timing.warm_clocks). A worker that skips it only lengthens
        what the judge's clock then sees of its own forwards."""
        seconds = msg.get("seconds")
        if self.device == "cuda" and isinstance(seconds, int | float):
            _warm(float(seconds))
        return {}

    def serve(
        self,
        *,
        _receive: Any = protocol.receive,
        _send: Any = protocol.send,
        _closed: type[BaseException] = protocol.ChannelClosed,
        _error: Any = _error_payload,
    ) -> None:
        # One handler per request of sandbox.messages (tests/test_sandbox_messages.py holds them equal),
        # built at start, before the candidate is imported.
        handlers: dict[str, Callable[[messages.Wire], Mapping[str, Any]]] = {
            "init": self.init,
            "load": self.load,
            "run": self.run,
            "time": self.time,
            "fetch": self.fetch,
            "keep": self.keep,
            "profile": self.profile,
            "forwards": self.forwards,
            "integrity": self.integrity,
            "burst": self.burst,
            "ping": self.ping,
            "warm": self.warm,
            "graph_capture": self.graph_capture,
            "graph_replay": self.graph_replay,
        }
        req_fd, resp_fd = self.req_fd, self.resp_fd
        while True:
            try:
                msg = _receive(req_fd)
            except _closed:
                return
            if msg.get("cmd") == "exit":
                return
            reply: dict[str, Any] = {"nonce": msg.pop("nonce", None)}  # a messages.Envelope, then the reply
            try:
                reply.update(ok=True, **handlers[msg["cmd"]](msg))
            except BaseException as exc:  # noqa: BLE001 — every failure, SystemExit included, goes back as data
                reply.update(ok=False, error=_error(exc))
            _send(resp_fd, reply)


def main(config: dict[str, Any]) -> None:
    Worker(config).serve()
    os._exit(0)
