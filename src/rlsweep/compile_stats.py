"""Per-function compile accounting: compile time, graph breaks, recompiles and CUDA-graph skips, with reasons.

A wrapped function's call during which anything compiled counts, whole, as compile time. The reasons
are what ``TORCH_LOGS=graph_breaks,recompiles`` would print, read from dynamo's structured records
(``graph_break_reasons``, ``get_compilation_metrics()``) and inductor's ``cudagraphs`` log, unlogged.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import re
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

# torch._dynamo is imported where it is used, not here: its import is slow (sympy, inductor,
# torch.distributed) and eager jobs, which never wrap a function, must not pay that at start-up

#: distinct reasons kept per function and kind (graph break / recompile); later ones only counted
MAX_REASONS = 20
#: characters kept of one reason (whitespace collapsed first)
MAX_REASON_CHARS = 500
#: frames of a graph break's user stack kept (innermost last)
MAX_STACK_FRAMES = 5
#: prefix of the reason of a frame whose compilation gave up (it runs eagerly)
SKIPPED_PREFIX = "frame skipped, runs eagerly: "

_COMPILE_ID_PREFIX = re.compile(r"^\s*!?[\d/]+:\s*")
# exception types dynamo swallows, falling back to eager for the frame (convert_frame's soft_fail)
_SOFT_FAILURES = ("Unsupported", "UserError")
_DEBUG_CONTEXT = re.compile(r"Developer debug context:.*?(?=For more details|\*\*\*|$)", re.S)
_MORE_DETAILS = re.compile(r"For more details about this graph break, please visit: (\S+)")


def _clip(text: Any, limit: int = MAX_REASON_CHARS) -> str:
    """One line of at most ``limit`` characters, '…' when cut; dynamo's "Developer debug context" is
    dropped and its "For more details ... visit: <url>" kept as "(<url>)"."""
    text = _MORE_DETAILS.sub(r"(\1)", _DEBUG_CONTEXT.sub(" ", str(text)))
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass
class FunctionCompileStats:
    """What compiling one function cost: seconds, compilations, recompiles and graph breaks, with their reasons."""

    compile_s: float = 0.0
    compilations: int = 0
    recompiles: int = 0
    graph_breaks: int = 0
    cudagraph_skips: int = 0
    direct_calls: int = 0  # calls that ran its compiled code directly (:meth:`CompileStats.calling_directly`)
    # distinct reasons (first MAX_REASONS of each kind), keyed for dedupe, values hold counts
    graph_break_reasons: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    recompile_reasons: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    cudagraph_skip_reasons: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    reasons_dropped: int = 0  # occurrences of distinct reasons beyond MAX_REASONS

    def add_reason(self, kind: str, entry: dict[str, Any]) -> None:
        """Count one graph break ("graph_break"), recompile ("recompile") or CUDA-graph skip ("cudagraph_skip")."""
        table = getattr(self, f"{kind}_reasons")
        key = tuple(v for k, v in entry.items() if k != "stack")
        if key in table:
            table[key]["count"] += 1
        elif len(table) < MAX_REASONS:
            table[key] = {**entry, "count": 1}
        else:
            self.reasons_dropped += 1

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["compile_s"] = round(self.compile_s, 6)
        for key in ("graph_break_reasons", "recompile_reasons", "cudagraph_skip_reasons"):
            out[key] = list(out[key].values())
        return out


def _counters() -> Any:
    """dynamo's process-wide counters (imported late: see above)."""
    from torch._dynamo.utils import counters

    return counters


def _graph_break_count() -> int:
    return sum(_counters()["graph_break"].values())


class _CudagraphSkipLog(logging.Handler):
    """Receives inductor's "skipping cudagraphs due to ..." messages for the function running now."""

    def __init__(self, owner: CompileStats) -> None:
        super().__init__(logging.WARNING)
        self.owner = owner

    def emit(self, record: logging.LogRecord) -> None:
        self.owner._stats().add_reason("cudagraph_skip", {"reason": _clip(record.getMessage())})


#: inductor's and AOT-autograd's cache counters: (record key, counter group, counter name)
_CACHE_COUNTERS = (("fxgraph_hits", "inductor", "fxgraph_cache_hit"), ("fxgraph_misses", "inductor", "fxgraph_cache_miss"),
                   ("fxgraph_bypasses", "inductor", "fxgraph_cache_bypass"),
                   ("aot_autograd_hits", "aot_autograd", "autograd_cache_hit"),
                   ("aot_autograd_misses", "aot_autograd", "autograd_cache_miss"))


def _cache_counts() -> dict[str, Any]:
    counters = _counters()
    return {**{key: counters[group][name] for key, group, name in _CACHE_COUNTERS}, **_BUILDS}


#: C++ this process built because the cache did not hold it, and the seconds spent (summed over
#: compile threads): an FX-graph cache hit whose kernel files are missing builds them again, unseen
#: by the FX-graph counters
_BUILDS: dict[str, Any] = {"cpp_kernel_builds": 0, "cpp_header_builds": 0, "cpp_build_s": 0.0}
_BUILDS_LOCK = threading.Lock()
_ORIGINAL_WORKER: list[Callable[..., Any]] = []


def _counted_worker_compile_cpp(lock_path: str, cpp_builders: Any) -> None:
    """inductor's ``_worker_compile_cpp``, through which every C++ build of its CPU backend goes, counted."""
    target = cpp_builders[-1].get_target_file_path()  # the library (or header) the builders make
    missing = not os.path.exists(target)
    t0 = time.perf_counter()
    _ORIGINAL_WORKER[0](lock_path, cpp_builders)
    if missing:
        with _BUILDS_LOCK:
            kind = "cpp_header_builds" if target.endswith((".gch", ".pch")) else "cpp_kernel_builds"
            _BUILDS[kind] += 1
            _BUILDS["cpp_build_s"] += time.perf_counter() - t0


def _count_cpp_builds() -> None:
    """Route inductor's C++ builds through :func:`_counted_worker_compile_cpp` (once per process)."""
    if _ORIGINAL_WORKER:
        return
    from torch._inductor import codecache

    _ORIGINAL_WORKER.append(codecache._worker_compile_cpp)
    codecache._worker_compile_cpp = _counted_worker_compile_cpp


def _break_entry(reason: Any, file: Any, line: Any, function: Any, stack: list[Any] | None = None) -> dict[str, Any]:
    """A graph break as a record entry: its reason, the user frame it happened in, and a short ``stack``
    (dynamo's user frames, innermost last) when there is more than that frame."""
    entry: dict[str, Any] = {"reason": _clip(reason), "file": file, "line": line, "function": function}
    if stack and len(stack) > 1:  # the call chain from the compiled function down to the break
        entry["stack"] = [f"{f.filename}:{f.lineno} in {f.name}" for f in stack[-MAX_STACK_FRAMES:]]
    return entry


def _compile_id(compile_id: Any) -> tuple[str | None, int]:
    """A compile id's frame and attempt ("3/1" -> ("3", 1); "!0/3/1" -> ("!0/3", 1)); (None, 0): not one."""
    frame, sep, attempt = (str(compile_id) if compile_id is not None else "").rpartition("/")
    return (frame, int(attempt)) if sep and attempt.isdigit() else (None, 0)


def _compiled_code(compiled: Callable[..., Any]) -> Callable[..., Any] | None:
    """The function ``torch.compile`` wrapped, with the code dynamo made of it in place of its own (its one
    cache entry: the compiled graph's call between the bytecode that feeds and unpacks it); None when
    dynamo keeps no single entry for it."""
    try:  # dynamo's own accessor, private: a torch without it keeps dynamo's path
        from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list
    except ImportError:
        return None
    original = getattr(compiled, "_torchdynamo_orig_callable", None)
    func = getattr(original, "__func__", original)
    code = getattr(func, "__code__", None)
    if code is None:
        return None
    entries = _debug_get_cache_entry_list(code)
    if len(entries) != 1 or entries[0].code.co_freevars != code.co_freevars:
        return None
    plain = types.FunctionType(entries[0].code, func.__globals__, func.__name__, func.__defaults__, func.__closure__)
    plain.__kwdefaults__ = func.__kwdefaults__
    return types.MethodType(plain, original.__self__) if inspect.ismethod(original) else plain


class CompileStats:
    """Collects compile statistics of the functions wrapped through :meth:`wrap`."""

    def __init__(self) -> None:
        self.functions: dict[str, FunctionCompileStats] = {}
        self.events = 0
        self._current: str | None = None
        self._breaks_at_start = 0
        self._break_records_at_start = 0
        self._installed = False
        # frame id -> wrapped function that compiled it, and the frame's (code name, file, first line)
        self._frames: dict[str, str] = {}
        self._frame_code: dict[str, tuple[str, Any, Any]] = {}
        self._dynamo_ids: set[str] = set()  # compile ids that ran the callbacks
        self._last_metrics: Any = None  # newest compilation-metrics record already read
        self._skip_log = _CudagraphSkipLog(self)
        self._cache_at_install: dict[str, int] | None = None
        self.vec_isa: str | None = None  # see cache_summary
        # per wrapped function: (its torch.compile wrapper, its stats, whether its mode captures CUDA graphs,
        # a one-item list holding what its calls run instead while calling_directly)
        self._wrapped: list[tuple[Callable[..., Any], FunctionCompileStats, bool, list[Any]]] = []

    def _stats(self, name: str | None = None) -> FunctionCompileStats:
        """The stats of ``name`` (default: the wrapped function running now), created on first use."""
        return self.functions.setdefault(name or self._current or "<other>", FunctionCompileStats())

    # dynamo callbacks ------------------------------------------------------------------------
    def _on_start(self, args: Any = None) -> None:
        from torch._dynamo.utils import graph_break_reasons

        self._harvest_metrics()
        self._breaks_at_start = _graph_break_count()
        self._break_records_at_start = len(graph_break_reasons)

    def _on_end(self, args: Any = None) -> None:
        from torch._dynamo.utils import graph_break_reasons as records

        self.events += 1
        name = self._current or "<other>"
        stats = self._stats(name)
        stats.compilations += 1
        compile_id = str(getattr(args, "compile_id", "0/0"))
        # the backward of a frame compiles lazily under the forward's compile id: not a recompile
        trigger = getattr(getattr(args, "callback_trigger", None), "name", "DYNAMO")
        if trigger == "DYNAMO":
            frame, attempt = _compile_id(compile_id)
            if attempt > 0:
                stats.recompiles += 1
            self._dynamo_ids.add(compile_id)
            if frame is not None:
                self._frames[frame] = name
        start = self._break_records_at_start if self._break_records_at_start <= len(records) else 0
        new_breaks = records[start:]
        for record in new_breaks:  # a GraphCompileReason: the break's frame is its user stack's innermost
            stack = list(getattr(record, "user_stack", None) or [])
            where = stack[-1] if stack else None
            entry = _break_entry(getattr(record, "reason", "?"), getattr(where, "filename", None),
                                 getattr(where, "lineno", None), getattr(where, "name", None), stack)
            stats.add_reason("graph_break", entry)
        # dynamo's counter misses some breaks (data-dependent jumps); its records miss none it counts
        stats.graph_breaks += max(_graph_break_count() - self._breaks_at_start, len(new_breaks))

    def _harvest_metrics(self) -> None:
        """Read the compilation-metrics records added since the last look: recompile and skip reasons."""
        from torch._dynamo.utils import get_compilation_metrics

        metrics = get_compilation_metrics()
        if not metrics:
            return
        seen = next((i + 1 for i in range(len(metrics) - 1, -1, -1) if metrics[i] is self._last_metrics), 0)
        self._last_metrics = metrics[-1]
        for m in metrics[seen:]:
            frame, _ = _compile_id(getattr(m, "compile_id", None))
            name = self._frames.get(frame) if frame is not None else None
            if name is None:
                continue  # not a frame of a wrapped function (or before install)
            co_name = getattr(m, "co_name", None)
            if co_name:
                self._frame_code[frame] = (co_name, getattr(m, "co_filename", None), getattr(m, "co_firstlineno", None))
            code = self._frame_code.get(frame)
            co_name, co_file, co_line = code or (None, None, None)
            stats = self._stats(name)
            recompile_reason = getattr(m, "recompile_reason", None)
            if recompile_reason:
                if str(getattr(m, "compile_id", "")) not in self._dynamo_ids:  # gave up before the callbacks ran
                    stats.recompiles += 1
                stats.add_reason(
                    "recompile",
                    {
                        "reason": _clip(_COMPILE_ID_PREFIX.sub("", str(recompile_reason))),
                        "frame": f"{co_name} ({co_file}:{co_line})" if code else None,
                    },
                )
            fail_reason = getattr(m, "fail_reason", None)
            soft = getattr(m, "fail_type", None) in _SOFT_FAILURES or getattr(m, "config_suppress_errors", False)
            if fail_reason and soft and getattr(m, "is_forward", None) is not False:
                # the frame's compilation gave up (graph break in a loop, recompile limit, ...):
                # the frame runs eagerly, which is a graph break around all of it (other failures
                # raise, and the job's error says why)
                stats.graph_breaks += 1
                stats.add_reason("graph_break", _break_entry(SKIPPED_PREFIX + str(fail_reason),
                                                             getattr(m, "fail_user_frame_filename", None) or co_file,
                                                             getattr(m, "fail_user_frame_lineno", None) or co_line,
                                                             co_name))

    def install(self) -> None:
        if not self._installed:
            import torch._dynamo
            from torch._inductor.cudagraph_utils import cudagraphs_log

            self._harvest_metrics()  # read past the earlier records: no frame of a wrapped function is among them
            _count_cpp_builds()
            self._cache_at_install = _cache_counts()  # the counters are per process: count this job's
            torch._dynamo.callback_handler.register_start_callback(self._on_start)
            torch._dynamo.callback_handler.register_end_callback(self._on_end)
            cudagraphs_log.addHandler(self._skip_log)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            import torch._dynamo
            from torch._inductor.cudagraph_utils import cudagraphs_log

            self._harvest_metrics()
            handler = torch._dynamo.callback_handler
            for registered, callback in ((handler.start_callbacks, self._on_start), (handler.end_callbacks, self._on_end)):
                if callback in registered:  # torch._dynamo.reset() (user code, tests) drops them
                    registered.remove(callback)
            cudagraphs_log.removeHandler(self._skip_log)
            self._installed = False

    # wrapping --------------------------------------------------------------------------------
    def wrap(self, compiled: Callable[..., Any], name: str, cudagraphs: bool = False,
             before_first_call: Callable[[], None] | None = None) -> Callable[..., Any]:
        """``compiled``, timed when it compiles; ``cudagraphs``: its mode captures CUDA graphs, count the skips.

        ``before_first_call`` runs once, before the first call, inside its compile time (what
        compiling had to wait for, e.g. the vector-ISA probe).
        """
        self.install()
        stats = self._stats(name)
        pending = [before_first_call] if before_first_call is not None else []
        direct: list[Any] = [None]
        self._wrapped.append((compiled, stats, cudagraphs, direct))

        def call(*args: Any, **kwargs: Any) -> Any:
            if (run := direct[0]) is not None:
                stats.direct_calls += 1
                return run(*args, **kwargs)
            events, skips = self.events, _counters()["inductor"]["cudagraph_skips"] if cudagraphs else 0
            outer, self._current = self._current, name
            t0 = time.perf_counter()
            try:
                while pending:
                    pending.pop()()
                out = compiled(*args, **kwargs)
            finally:  # a compile after this call (code rlsweep does not wrap) is not this function's
                self._current = outer
            if self.events != events:
                stats.compile_s += time.perf_counter() - t0
            if cudagraphs:
                stats.cudagraph_skips += max(0, _counters()["inductor"]["cudagraph_skips"] - skips)
            return out

        call.__wrapped__ = compiled  # type: ignore[attr-defined]
        call.__name__ = f"compiled_{name}"
        return call

    @contextlib.contextmanager
    def calling_directly(self) -> Iterator[None]:
        """In the block, a wrapped function that dynamo compiled once and whole runs the code dynamo made of
        it, called as a plain function: what dynamo runs on each call once its guards pass, without its frame
        hook and guards (~60 us a call here, a quarter of PPO's compiled gradient step on a CPU).

        As unsafe as ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``, under which it is used
        (``compile.skip_guards_after_warmup``): a call whose guards would fail runs the old graph. A function
        dynamo compiled more than once or with a graph break (its resumed parts would run eagerly), or
        whose mode captures CUDA graphs (tagged per call by dynamo's hook), keeps dynamo's path.
        """
        for compiled, stats, cudagraphs, direct in self._wrapped:
            if not cudagraphs and stats.graph_breaks == 0:
                direct[0] = _compiled_code(compiled)
        try:
            yield
        finally:
            for *_, direct in self._wrapped:
                direct[0] = None

    def all_compiled(self) -> bool:
        """Whether every wrapped function has compiled at least once."""
        return bool(self.functions) and all(f.compilations > 0 for f in self.functions.values())

    def total_compile_s(self) -> float:
        return sum(v.compile_s for v in self.functions.values())

    def cache_summary(self) -> dict[str, Any] | None:
        """What the on-disk caches served and what this job built (the record's ``compile.cache``); None when
        nothing was compiled through these stats. ``state``: ``warm`` (every look-up hit and nothing was
        built), ``cold`` (nothing hit), ``partial`` or None (nothing compiled); ``served_from_cache``:
        hits / (hits + misses + builds); ``vec_isa``: how the CPU vector ISA was settled
        (:func:`~rlsweep.toggles.compile.prepare_vec_isa`): "cached" (a verdict from an earlier job),
        "probed", "user" (TORCHINDUCTOR_VEC_ISA_OK) or None.
        """
        if self._cache_at_install is None:
            return None
        now = _cache_counts()
        counts = {k: now[k] - self._cache_at_install[k] for k in now}
        counts["cpp_build_s"] = round(counts["cpp_build_s"], 3)
        hits = counts["fxgraph_hits"] + counts["aot_autograd_hits"]
        built = (counts["fxgraph_misses"] + counts["aot_autograd_misses"] + counts["cpp_kernel_builds"]
                 + counts["cpp_header_builds"])
        looked_up = hits + built
        state = None if not looked_up else "warm" if not built else "cold" if not hits else "partial"
        return {"dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR"), **counts, "state": state,
                "served_from_cache": round(hits / looked_up, 4) if looked_up else None, "vec_isa": self.vec_isa}

    def summary(self, mode: str) -> dict[str, Any]:
        """The record's ``compile`` section (its fields: docs/reference/record.md).

        A frame that runs eagerly because its compilation gave up is a graph break whose reason starts
        with :data:`SKIPPED_PREFIX`; a recompile's ``frame`` is ``"<code name> (<file>:<first line>)"``.
        """
        if self._installed:
            self._harvest_metrics()
        return {
            "cache": self.cache_summary(),
            "mode": mode,
            "compile_s": round(self.total_compile_s(), 6),
            **{k: sum(getattr(v, k) for v in self.functions.values())
               for k in ("graph_breaks", "recompiles", "cudagraph_skips")},
            "per_function": {k: v.as_dict() for k, v in self.functions.items()},
        }
