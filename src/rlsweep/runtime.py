"""The runtime an algorithm is handed: every toggle reaches the algorithm's code through it.

Algorithms never read toggle values: they call ``rt.policy``, ``rt.update``/``rt.minimize``,
``rt.autocast``, ``rt.activation``, ``rt.polyak_update`` and ``rt.normalize``, whose switches each
toggle's ``apply`` sets (:mod:`rlsweep.toggles`): a toggle acts in one place, for every algorithm.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from rlsweep.seeds import stack_builds, vmap_over_seeds
from rlsweep.update import Update

if TYPE_CHECKING:
    from rlsweep.compile_stats import CompileStats
    from rlsweep.timing import PhaseTimer
    from rlsweep.toggles.compile import CompileConfig


def _outputs_cloned(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with its output tensors cloned: a CUDA graph's replay overwrites the last one's outputs,
    which callers keep (an epoch's update statistics)."""
    from torch.utils._pytree import tree_map_only

    def call(*args: Any, **kwargs: Any) -> Any:
        return tree_map_only(torch.Tensor, torch.clone, fn(*args, **kwargs))

    return call


class Activation(nn.Module):
    """tanh or ReLU, in-place or not (the ``inplace`` toggle's place in every network)."""

    _FNS = {("relu", False): torch.relu, ("relu", True): torch.relu_,
            ("tanh", False): torch.tanh, ("tanh", True): torch.tanh_}

    def __init__(self, kind: str, inplace: bool) -> None:
        super().__init__()
        self.kind = kind
        self.inplace = inplace
        self.fn = self._FNS[kind, inplace]  # the one torch op; nets.MLP calls it without this forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)

    def extra_repr(self) -> str:
        return f"{self.kind}, inplace={self.inplace}"


_NO_AUTOCAST = contextlib.nullcontext()  # reusable: one object for every float32 forward (acting calls it per step)


class NonFiniteLossError(FloatingPointError):
    """Raised when a loss becomes NaN/inf: the job stops instead of silently diverging."""


@dataclasses.dataclass
class Settings:
    """What the toggles set on a job's :class:`Runtime` (``rt.settings``): each toggle's own business, read by
    the runtime's methods; an algorithm needs none of it. The defaults are the baseline (every toggle off)."""

    #: compile: its settings (None: compile=none), and the CPU vector-ISA probe started with the job
    #: (toggles.compile.VecIsaProbe), which compiling waits for
    compile_config: CompileConfig | None = None
    compile_vec_isa: Any = None
    #: dtype: the autocast dtype (None: float32), and float16's GradScaler on CUDA
    autocast_dtype: torch.dtype | None = None
    use_grad_scaler: bool = False
    #: pin_memory: False, True (.pin_memory() per copy) or "staging"; non_blocking copies
    pin_memory: bool | str = False
    non_blocking: bool = False
    twin_modules: bool = False
    inplace: bool = False
    #: backend.channels_last: convolutional networks (nets.NatureCNN) in NHWC memory format
    channels_last: bool = False


class Runtime:
    """Acting, the gradient step, copies, random streams and seeds, done as the toggles say (``rt.settings``);
    what an algorithm is written against."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.is_cuda = device.type == "cuda"
        self.settings = Settings()
        self.compile_stats: CompileStats | None = None
        self._updates: list[Update] = []  # every update made through rt.update, in order (the checkpoint keeps their GradScalers)
        self._staging: PinnedStaging | None = None
        self._active_update: Update | None = None  # the gradient step being taken (rt.minimize's)
        # seeds_per_job: the seeds trained together (the runner sets them before anything is built),
        # their random streams, why a seed stopped (by index)
        self.seed_values: tuple[int, ...] = (0,)
        self._rngs: list[torch.Generator] | None = None  # made at first use: a generator on CUDA touches CUDA
        self.failed: dict[int, str] = {}

    # -- seeds trained together ----------------------------------------------------------------
    @property
    def seeds(self) -> int:
        """How many seeds this process trains together (``seeds_per_job``; 1 for a job of one seed)."""
        return len(self.seed_values)

    @property
    def rngs(self) -> list[torch.Generator]:
        """Each seed's own random stream for the algorithm's draws (:meth:`draw`), in ``seed_values`` order."""
        if self._rngs is None:
            # apart from the stream each seed's networks were built from (torch.manual_seed(seed))
            self._rngs = [torch.Generator(device=self.device).manual_seed(
                int(np.random.SeedSequence([s, 1]).generate_state(1, np.uint64)[0] >> 1)) for s in self.seed_values]
        return self._rngs

    def per_seed(self, build: Callable[[], Any]) -> Any:
        """``build()``'s networks, built once per seed after ``torch.manual_seed(seed)``; with several
        seeds each module becomes a :class:`~rlsweep.seeds.SeedStack` (build every network in one call)."""
        builds = []
        for seed in self.seed_values:
            torch.manual_seed(seed)
            builds.append(build())
        return builds[0] if len(builds) == 1 else stack_builds(builds)

    def draw(self, fn: Callable[[torch.Generator], torch.Tensor], dim: int = 0) -> torch.Tensor:
        """``fn(generator)`` for each seed's own random stream, concatenated along ``dim`` (the envs')."""
        draws = [fn(g) for g in self.rngs]
        return draws[0] if len(draws) == 1 else torch.cat(draws, dim)

    def draw_per_seed(self, fn: Callable[[torch.Generator], torch.Tensor]) -> torch.Tensor:
        """``fn(generator)`` for each seed, stacked on a new leading dimension (none with one seed)."""
        draws = [fn(g) for g in self.rngs]
        return draws[0] if len(draws) == 1 else torch.stack(draws)

    def rows(self, x: torch.Tensor, env_dim: int) -> torch.Tensor:
        """``x``'s dimensions up to ``env_dim`` (every seed's envs, seed by seed) as seed-major rows."""
        if self.seeds == 1:
            return x.flatten(0, env_dim)
        return x.unflatten(env_dim, (self.seeds, -1)).movedim(env_dim, 0).flatten(0, env_dim + 1)

    def unrows(self, y: torch.Tensor, lead: tuple[int, ...]) -> torch.Tensor:
        """The inverse of :meth:`rows`: ``y``'s rows back into the ``lead`` dimensions they came from."""
        if self.seeds == 1:
            return y.unflatten(0, lead)
        *before, envs = lead
        out = y.unflatten(0, (self.seeds, *before, envs // self.seeds))
        return out.movedim(0, len(before)).flatten(len(before), len(before) + 1)

    def by_seed(self, x: torch.Tensor, env_dim: int) -> torch.Tensor:
        """:meth:`rows` with the seeds as a leading dimension (what :meth:`update` vmaps over); one seed: the rows."""
        r = self.rows(x, env_dim)
        return r if self.seeds == 1 else r.unflatten(0, (self.seeds, -1))

    def per_env(self, t: torch.Tensor, envs_per_seed: int) -> torch.Tensor:
        """A per-seed tensor (seeds first) repeated for each of the seed's envs; with one seed, as is."""
        return t if self.seeds == 1 else t.repeat_interleave(envs_per_seed, 0)

    def check_finite(self, loss: torch.Tensor, update: int) -> None:
        """Stop a seed whose ``loss`` (one per seed last, or a scalar) is NaN or infinite, with one host sync:
        raises :class:`NonFiniteLossError` for one seed; with several it marks the seed failed (the others
        train on) and raises once every seed has failed."""
        finite = torch.isfinite(loss).reshape(-1, self.seeds).all(0).tolist()  # the one host sync
        if self.seeds == 1 and not finite[0]:
            raise NonFiniteLossError(f"non-finite loss at update {update}")
        for k, ok in enumerate(finite):
            if not ok and k not in self.failed:
                self.failed[k] = f"non-finite loss at update {update}"
        if len(self.failed) == self.seeds:
            raise NonFiniteLossError(f"non-finite loss at update {update} in every seed")

    # -- host <-> device -------------------------------------------------------------------
    def h2d(self, array: np.ndarray | torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Copy a host array to the job's device (pinned and/or asynchronous per the toggles)."""
        # from_numpy: the same zero-copy view as as_tensor, with less call overhead
        t = torch.from_numpy(array) if isinstance(array, np.ndarray) else torch.as_tensor(array)
        if dtype is not None and t.dtype != dtype:
            t = t.to(dtype)
        if not self.is_cuda:
            return t
        if self.settings.pin_memory == "staging":
            if self._staging is None:
                self._staging = PinnedStaging(self.device)
            return self._staging.to_device(t, self.settings.non_blocking)
        if self.settings.pin_memory:
            t = t.pin_memory()
        return t.to(self.device, non_blocking=self.settings.non_blocking)

    def d2h(self, tensor: torch.Tensor) -> np.ndarray:
        """Copy a device tensor to a host numpy array, synchronised before it is read."""
        if not self.is_cuda:  # detach is an op of its own: acting's inference tensors need none
            return (tensor.detach() if tensor.requires_grad else tensor).numpy()
        host = tensor.detach().to("cpu", non_blocking=self.settings.non_blocking)
        if self.settings.non_blocking:
            # an asynchronous D2H copy is only valid after the stream has finished it
            torch.cuda.current_stream(self.device).synchronize()
        return host.numpy()

    # -- compile -----------------------------------------------------------------------------
    def compiles(self, name: str) -> bool:
        """Whether :meth:`compile` compiles the function called ``name``."""
        return self.settings.compile_config is not None and name in self.settings.compile_config.functions

    def compile(self, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        """``torch.compile`` ``fn`` with the job's mode, or ``fn`` itself when ``name`` ("act", "update")
        is not among ``compile.functions``."""
        if not self.compiles(name):
            return fn
        c = self.settings.compile_config
        assert c is not None and self.compile_stats is not None
        how: dict[str, Any] = {"mode": c.mode}
        if c.cpp_wrapper:  # torch.compile takes a mode or options: the mode's options, plus this
            from torch._inductor import list_mode_options

            how = {"options": {**list_mode_options(c.mode), "cpp_wrapper": True}}
        compiled = torch.compile(fn, fullgraph=c.fullgraph, dynamic=c.dynamic, **how)
        # these modes capture CUDA graphs (inductor's triton.cudagraphs): count the graphs it skips
        cudagraphs = c.mode in ("reduce-overhead", "max-autotune")
        if cudagraphs and self.is_cuda:
            compiled = _outputs_cloned(compiled)
        return self.compile_stats.wrap(compiled, name, cudagraphs=cudagraphs, before_first_call=self._vec_isa_ready)

    def _vec_isa_ready(self) -> None:
        if self.settings.compile_vec_isa is not None:
            assert self.compile_stats is not None
            self.compile_stats.vec_isa = self.settings.compile_vec_isa.ready()

    # -- acting and the gradient step ------------------------------------------------------------
    def policy(self, timer: PhaseTimer, *modules: nn.Module, forward: Callable[..., torch.Tensor] | None = None,
               obs_dtype: torch.dtype = torch.float32) -> Policy:
        """The acting call of an algorithm: see :class:`Policy`."""
        return Policy(self, timer, modules, forward, obs_dtype)

    def update(self, step: Callable[..., Any], modules: Any, optimizers: Any, name: str = "update") -> Update:
        """The gradient step ``step`` (which calls :meth:`minimize`), taken as the toggles say (:mod:`rlsweep.update`);
        ``modules`` hold every parameter the ``optimizers`` optimize, ``name`` is for ``compile.functions``."""
        update = Update(self, step, modules, optimizers, name)
        self._updates.append(update)
        return update

    def minimize(self, loss_fn: Callable[[], Any], optimizer: torch.optim.Optimizer, *,
                 max_grad_norm: float | None = None, has_aux: bool = False) -> Any:
        """One step of ``optimizer`` on the loss ``loss_fn()`` returns; the loss, detached.

        Call it inside the step given to :meth:`update`, once per optimizer. With ``has_aux``
        ``loss_fn`` returns ``(loss, aux)``, and so does this; ``max_grad_norm`` clips the global L2 norm.
        """
        if self._active_update is None:
            raise RuntimeError("rt.minimize is called inside the step function given to rt.update")
        return self._active_update.minimize(loss_fn, optimizer, max_grad_norm, has_aux)

    # -- dtype -------------------------------------------------------------------------------
    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Mixed-precision region for forwards and losses (a no-op in float32)."""
        if self.settings.autocast_dtype is None:
            return _NO_AUTOCAST
        return torch.autocast(self.device.type, dtype=self.settings.autocast_dtype)

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """A GradScaler when float16 runs on CUDA, else None (one per :class:`Update`)."""
        return torch.amp.GradScaler(self.device.type) if self.settings.use_grad_scaler else None

    # -- inplace ---------------------------------------------------------------------------------
    def activation(self, kind: str) -> nn.Module:
        return Activation(kind, inplace=self.settings.inplace)

    @torch.no_grad()
    def polyak_update(self, target: Iterable[torch.Tensor], source: Iterable[torch.Tensor], tau: float) -> None:
        """target <- target + tau * (source - target), in place or via new tensors (each seed's slices in a step)."""
        tgt, src = list(target), list(source)
        if self._active_update is not None:
            tgt, src = self._active_update.current(tgt), self._active_update.current(src)
        if self.settings.inplace:
            torch._foreach_lerp_(tgt, src, tau)
        else:
            for t, s in zip(tgt, src, strict=True):
                t.copy_(torch.lerp(t, s, tau))

    def normalize(self, x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
        """(x - mean) / (std + eps), in place on ``x`` or out of place."""
        mean, std = x.mean(), x.std()
        if self.settings.inplace:
            return x.sub_(mean).div_(std + eps)
        return (x - mean) / (std + eps)


class PinnedStaging:
    """Page-locked host buffers allocated once per (shape, dtype), two used in turn, for every copy.

    With ``non_blocking`` a buffer waits for the event of its last copy before it is refilled.
    ``allocate`` and ``new_event`` let tests without CUDA pass stand-ins.
    """

    SLOTS = 2

    def __init__(self, device: torch.device, allocate: Callable[[tuple[int, ...], torch.dtype], torch.Tensor] | None = None,
                 new_event: Callable[[], Any] | None = None) -> None:
        self.device = device
        self._allocate = allocate or (lambda shape, dtype: torch.empty(shape, dtype=dtype, pin_memory=True))
        self._new_event = new_event or (lambda: torch.cuda.Event())
        # (shape, dtype) -> its SLOTS [buffer, event of its last asynchronous copy or None], in turn
        self._rings: dict[tuple[tuple[int, ...], torch.dtype], Iterator[list[Any]]] = {}

    def to_device(self, t: torch.Tensor, non_blocking: bool) -> torch.Tensor:
        key = (tuple(t.shape), t.dtype)
        if key not in self._rings:
            self._rings[key] = itertools.cycle([[self._allocate(key[0], t.dtype), None] for _ in range(self.SLOTS)])
        slot = next(self._rings[key])
        if slot[1] is not None:
            slot[1].synchronize()  # the last copy out of this buffer has finished: it may be overwritten
            slot[1] = None
        slot[0].copy_(t)
        out = slot[0].to(self.device, non_blocking=non_blocking)
        if non_blocking:
            slot[1] = self._new_event()
            slot[1].record()
        return out


class Policy:
    """Acting, written once: ``policy(obs, *extra)`` copies ``obs`` to the device (timed "h2d"), runs
    ``forward(*modules, obs, *extra)`` on eval-mode views of ``modules`` under autocast and inference
    mode, compiled as "act" (timed "act"), and copies the output back (timed "d2h").

    Without ``forward`` it is the first module's forward, as bare ops where the module has them
    (``nets.MLP.inference_fn``).
    """

    def __init__(self, rt: Runtime, timer: PhaseTimer, modules: Iterable[nn.Module],
                 forward: Callable[..., torch.Tensor] | None, obs_dtype: torch.dtype) -> None:
        self.rt, self.timer, self.obs_dtype = rt, timer, obs_dtype
        self.views = ActingModules(modules, twin=rt.settings.twin_modules)
        #: the eval-mode modules acting uses (twins or the originals)
        self.modules = self.views.modules
        if forward is not None and rt.seeds > 1:  # each seed's call sees its own networks
            forward = vmap_over_seeds(forward, self.modules, rt.seeds)
        self._forward = rt.compile(forward or _first_module, "act")
        self._bare: Callable[[torch.Tensor], torch.Tensor] | None = None
        if forward is None and not rt.compiles("act"):
            inference_fn = getattr(self.modules[0], "inference_fn", None)
            with rt.autocast():
                self._bare = inference_fn() if inference_fn is not None else None

    def __call__(self, obs: np.ndarray, *extra: torch.Tensor) -> np.ndarray:
        rt, timer = self.rt, self.timer
        t = timer.start()
        obs_t = rt.h2d(obs, self.obs_dtype)
        t = timer.lap("h2d", t)
        # inference tensors skip autograd's version counters and view tracking (docs/results/profiling.md)
        with torch.inference_mode(), self.views, rt.autocast():
            out = self._bare(obs_t) if self._bare is not None else self._forward(*self.modules, obs_t, *extra)
        t = timer.lap("act", t)
        out_np = rt.d2h(out)
        timer.stop("d2h", t)
        return out_np


def _first_module(module: nn.Module, *rest: Any) -> torch.Tensor:
    """The default acting forward: the first module on the observations (the last argument)."""
    return module(rest[-1])


class ActingModules:
    """Eval-mode views of networks for acting: twins, or the originals switched around each use (:class:`Policy`)."""

    def __init__(self, modules: Iterable[nn.Module], twin: bool) -> None:
        self.originals = tuple(modules)
        self.twin = twin
        # a twin is an eval-mode copy sharing the Parameter and buffer objects: it sees every optimizer step
        self.modules = tuple(copy.deepcopy(m, memo={id(t): t for t in [*m.parameters(), *m.buffers()]}).eval()
                             for m in self.originals) if twin else self.originals

    def __enter__(self) -> None:
        if not self.twin:
            for m in self.originals:
                m.eval()

    def __exit__(self, *exc: object) -> None:
        if not self.twin:
            for m in self.originals:
                m.train()
