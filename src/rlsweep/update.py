"""The gradient step, owned by the runtime: an algorithm writes its losses, rlsweep takes the step.

An algorithm builds one :class:`Update` around its gradient-step function, which hands each loss to
:meth:`Runtime.minimize` with the ``torch.optim`` optimizer that owns its parameters::

    self.update = rt.update(self._gradient_step, self.modules(), self.optimizers())

    def _gradient_step(self, obs, actions, target):
        return rt.minimize(lambda: self._td_loss(obs, actions, target), self.optimizer, max_grad_norm=10.0)

How the step is taken is the ``compile`` and ``dtype`` toggles' business:

* eager (the baseline): ``loss.backward()``, the norm clip, the optimizer's ``step()``; with float16
  on CUDA one GradScaler for the step's optimizers;
* compiled ("update" in ``compile.functions``): ONE graph (``backward()`` and ``step()`` would split it
  in three): the loss with the parameters swapped in (``torch.func.functional_call``), gradients from
  ``torch.func.grad_and_value``, and the clip and update as torch's formulas on the optimizer's own
  state tensors, so checkpoints see an ordinary ``torch.optim`` state. Learning rates are tensors.

The single-graph step knows Adam, AdamW, RMSprop and SGD; another optimizer, an option it does not
write (``amsgrad``, ``maximize``, SGD's ``dampening``) or a GradScaler keeps the eager step inside
the compiled function (the compile record shows its graph breaks).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from rlsweep.seeds import Root, per_seed_step

if TYPE_CHECKING:
    from rlsweep.runtime import Runtime

#: optimizer state per parameter that the single-graph step reads and writes, by optimizer class
_STATE_KEYS: dict[type[torch.optim.Optimizer], Callable[[dict[str, Any]], tuple[str, ...]]] = {
    torch.optim.Adam: lambda g: ("step", "exp_avg", "exp_avg_sq"),
    torch.optim.AdamW: lambda g: ("step", "exp_avg", "exp_avg_sq"),
    torch.optim.RMSprop: lambda g: ("step", "square_avg", *(("momentum_buffer",) if g["momentum"] > 0 else ()),
                                    *(("grad_avg",) if g["centered"] else ())),
    torch.optim.SGD: lambda g: ("momentum_buffer",) if g["momentum"] != 0 else (),
}


def single_graph_refusal(optimizer: torch.optim.Optimizer) -> str | None:
    """Why ``optimizer`` cannot take its step inside the single graph (None: it can)."""
    kind = type(optimizer)
    if kind not in _STATE_KEYS:
        return f"{kind.__name__} is not one of {', '.join(k.__name__ for k in _STATE_KEYS)}"
    for group in optimizer.param_groups:
        for option in ("amsgrad", "maximize", "differentiable", "fused"):
            if group.get(option):
                return f"{kind.__name__}({option}=True)"
        if kind is torch.optim.SGD and group["momentum"] != 0 and group["dampening"] != 0:
            return "SGD with momentum and dampening != 0"  # its first step differs from the recurrence
    return None


class Update:
    """One gradient step of an algorithm, taken as the toggles say (module docstring); made by
    :meth:`Runtime.update`, called with the step function's arguments."""

    def __init__(self, rt: Runtime, step: Callable[..., Any], modules: Mapping[str, nn.Module] | Iterable[nn.Module],
                 optimizers: Mapping[str, torch.optim.Optimizer] | Iterable[torch.optim.Optimizer],
                 name: str = "update") -> None:
        self.rt = rt
        self.step = step
        mods = dict(modules) if isinstance(modules, Mapping) else {str(i): m for i, m in enumerate(modules)}
        self.optimizers = tuple(optimizers.values() if isinstance(optimizers, Mapping) else optimizers)
        self.scaler = rt.grad_scaler()
        refusal = "float16's GradScaler" if self.scaler is not None else next(
            filter(None, map(single_graph_refusal, self.optimizers)), None)
        #: seeds trained together (rt.seeds): > 1 vmaps the whole step over them, which needs the single graph
        self.seeds = rt.seeds
        if self.seeds > 1 and refusal:
            raise ValueError(f"seeds_per_job={self.seeds} takes each gradient step for every seed at once, "
                             f"with the optimizer's formulas written in rlsweep.update; this step cannot: {refusal}")
        # one graph when compiled or vectorised; a refused step compiles with backward() + step() in it
        self.single_graph = self.seeds > 1 or (rt.compiles(name) and not refusal)
        self._root = Root(mods)
        #: every parameter under its first name, once: dynamo would guard a walk of the modules module by module
        self._params = tuple(self._root.named_parameters())
        names = {id(p): n for n, p in self._params}
        self._by_id = {**names, **{id(b): n for n, b in self._root.named_buffers()}}
        self._names: list[list[str]] = []
        for opt in self.optimizers:
            params = [p for g in opt.param_groups for p in g["params"]]
            loose = [tuple(p.shape) for p in params if id(p) not in names]
            if loose:
                raise TypeError(f"{type(opt).__name__} optimizes tensors of shapes {loose} that are not parameters "
                                f"of the modules given to rt.update ({', '.join(mods)}): hold each as an "
                                f"nn.Parameter of one of them")
            self._names.append([names[id(p)] for p in params])
            if rt.is_cuda and "capturable" in opt.defaults:
                # step counters on the device: no host sync per step, and a compiled step is one device graph
                for group in opt.param_groups:
                    group["capturable"] = True
        #: per optimizer, what the single-graph step reads: the same objects every call, filled in place
        self._bound: list[Any] = [None] * len(self.optimizers)
        #: inside the vectorised step: one seed's (parameters and buffers by name, optimizer states)
        self._seed: tuple[dict[str, torch.Tensor], list[Any]] | None = None
        self._fn = rt.compile(step if self.seeds == 1 else self._vectorised, name)
        #: the stacks the vectorised step reads, detached once (views of the storage each seed's step writes)
        self._held = {n: t.detach() for n, t in (*self._params, *self._root.named_buffers())} if self.seeds > 1 else {}

    def __call__(self, *args: Any) -> Any:
        if self.single_graph:
            for i in range(len(self.optimizers)):
                self._refresh(i)
        self.rt._active_update = self
        try:
            if self.seeds == 1:
                out = self._fn(*args)
            else:  # the stacks and the optimizers' state, passed in: vmap hands each seed its own slices
                out = self._fn(self._held, [bound[2] for bound in self._bound], *args)
        finally:
            self.rt._active_update = None
        if self.scaler is not None:
            self.scaler.update()  # once per gradient step, after every optimizer it scaled
        return out

    def _vectorised(self, held: dict[str, torch.Tensor], states: list[Any], *args: Any) -> Any:
        """The step once per seed, vmapped: tensor arguments and state have the seeds first (step counters,
        one scalar for all seeds, excepted); each seed's step writes into its own slices."""
        def one_seed(own: dict[str, torch.Tensor], own_states: list[Any], *own_args: Any) -> Any:
            self._seed = (own, own_states)
            try:  # the whole step sees this seed's networks (a target computed before rt.minimize too)
                with per_seed_step():
                    return torch.func.functional_call(self._root, own, (lambda: self.step(*own_args),),
                                                      tie_weights=False)
            finally:
                self._seed = None

        state_dims = torch.utils._pytree.tree_map(lambda t: None if t.dim() == 0 else 0, states)
        arg_dims = tuple(0 if isinstance(a, torch.Tensor) else None for a in args)
        return torch.func.vmap(one_seed, in_dims=(0, state_dims, *arg_dims))(held, states, *args)

    def current(self, tensors: Iterable[torch.Tensor]) -> list[torch.Tensor]:
        """``tensors`` (the step's parameters) as the step sees them: this seed's slices inside the vmapped step."""
        if self._seed is None:
            return list(tensors)
        own = self._seed[0]
        return [own[self._by_id[id(t)]] for t in tensors]

    # -- eager: autograd and torch.optim ------------------------------------------------------------
    def minimize(self, loss_fn: Callable[[], Any], optimizer: torch.optim.Optimizer, max_grad_norm: float | None,
                 has_aux: bool) -> Any:
        if self.single_graph:
            return self._functional_minimize(loss_fn, optimizer, max_grad_norm, has_aux)
        out = loss_fn()
        loss, aux = out if has_aux else (out, None)
        optimizer.zero_grad(set_to_none=True)
        scaler = self.scaler
        (loss if scaler is None else scaler.scale(loss)).backward()
        if max_grad_norm is not None:
            if scaler is not None:
                scaler.unscale_(optimizer)  # the norm is of the true gradients
            nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], max_grad_norm)
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
        return (loss.detach(), aux) if has_aux else loss.detach()

    # -- compiled: one graph -------------------------------------------------------------------------
    def _functional_minimize(self, loss_fn: Callable[[], Any], optimizer: torch.optim.Optimizer,
                             max_grad_norm: float | None, has_aux: bool) -> Any:
        index = next(i for i, o in enumerate(self.optimizers) if o is optimizer)
        names = self._names[index]
        # every other parameter enters detached: the loss is differentiated for this optimizer's only
        frozen = {n: p.detach() for n, p in self._params} if self._seed is None else self._seed[0]

        def loss_of(own: dict[str, torch.Tensor]) -> Any:
            # each parameter swapped once, under its first name: swapping a module held twice (PPO's Atari
            # encoder) under both names would put a transformed tensor back into it
            return torch.func.functional_call(self._root, {**frozen, **own}, (loss_fn,), tie_weights=False)

        grads, out = torch.func.grad_and_value(loss_of, has_aux=has_aux)({n: frozen[n] for n in names})
        grad_list = [grads[n] for n in names]
        if max_grad_norm is not None:
            grad_list = clip_grad_norm(grad_list, max_grad_norm)
        # the groups as _refresh copied them: dynamo would guard on torch.optim's dicts, which a schedule writes
        groups, lrs, states, _, _ = self._bound[index]
        if self._seed is not None:  # this seed's slices of the stacked parameters and state
            states = self._seed[1][index]
        start = 0
        for (params, hyper), lr, state in zip(groups, lrs, states, strict=True):
            end = start + len(params)
            if self._seed is not None:
                params = [frozen[n] for n in names[start:end]]
            _STEPS[type(optimizer)](params, grad_list[start:end], state, hyper, lr)
            start = end
        loss, aux = out if has_aux else (out, None)
        return (loss.detach(), aux) if has_aux else loss.detach()

    def _refresh(self, index: int) -> None:
        """Bring ``self._bound[index]`` up to date with optimizer ``index``: (groups, learning rates, state).

        The groups are constants of the graph (replaced, they recompile); a float learning rate is
        copied into a tensor and a loaded state into the graph's state tensors, which do not recompile.
        """
        opt = self.optimizers[index]
        bound = self._bound[index]
        if bound is not None and bound[3] is opt.state and bound[4] == opt.param_groups:
            return  # nothing changed since the last step (the hot path: one comparison of the group dicts)
        if bound is None or len(bound[0]) != len(opt.param_groups) or any(
                g["params"] is not params or len(g) != len(hyper) + 2 or any(g[k] != v for k, v in hyper.items())
                for g, (params, hyper) in zip(opt.param_groups, bound[0], strict=False)):
            groups = tuple((g["params"], {k: v for k, v in g.items() if k not in ("params", "lr")})
                           for g in opt.param_groups)
            lrs = [torch.zeros((), device=self.rt.device) for _ in opt.param_groups]
            bound = (groups, lrs, [_state_lists(opt, g) for g in opt.param_groups], opt.state, None)
        groups, lrs, states, state_dict, _ = bound
        for k, group in enumerate(opt.param_groups):
            lr = group["lr"]
            if isinstance(lr, torch.Tensor):
                lrs[k] = lr
            else:
                lrs[k].fill_(lr)
        if state_dict is not opt.state:  # load_state_dict replaced it: copy into the tensors the graph holds
            for group, lists in zip(opt.param_groups, states, strict=True):
                keys = _STATE_KEYS[type(opt)](group)
                for key, mine, theirs in zip(keys, lists, _state_lists(opt, group), strict=True):
                    for p, m, t in zip(group["params"], mine, theirs, strict=True):
                        if m is not t:
                            m.copy_(t)
                            opt.state[p][key] = m
        # what the groups held, compared before the next step (a tensor lr by identity: no device sync)
        self._bound[index] = (groups, lrs, states, opt.state, [dict(g) for g in opt.param_groups])


def _state_lists(opt: torch.optim.Optimizer, group: dict[str, Any]) -> list[list[torch.Tensor]]:
    """``group``'s state per key (parallel lists over its parameters), created as torch.optim creates it;
    a capturable optimizer's marked as static addresses, so a CUDA graph updates them in place."""
    keys = _STATE_KEYS[type(opt)](group)
    capturable = group.get("capturable", False)
    for p in group["params"]:
        state = opt.state[p]
        for key in keys:
            if key not in state:
                if key == "step":
                    state[key] = (torch.zeros((), dtype=torch.float32, device=p.device) if capturable
                                  else torch.tensor(0.0, dtype=torch.get_default_dtype()))
                else:
                    state[key] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if capturable:
            for t in state.values():
                torch._dynamo.mark_static_address(t)
    return [[opt.state[p][key] for p in group["params"]] for key in keys]


def clip_grad_norm(grads: Sequence[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    """``grads`` scaled as ``nn.utils.clip_grad_norm_`` scales them (global L2 norm, same epsilon)."""
    norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])
    clip = torch.clamp(max_norm / (torch.linalg.vector_norm(norms) + 1e-6), max=1.0)
    return [g * clip for g in grads]


# -- the optimizers' updates: torch.optim's single-tensor formulas on its state ---------------------
# Each result is computed out of place and copied into the state: the same values as torch.optim's
# in-place ops, which have no batching rule under vmap (seeds_per_job > 1).
@torch.no_grad()
def _adam(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], state: list[list[torch.Tensor]],
          group: dict[str, Any], lr: torch.Tensor, decoupled: bool = False) -> None:
    steps, exp_avgs, exp_avg_sqs = state
    beta1, beta2 = group["betas"]
    eps, weight_decay = group["eps"], group["weight_decay"]
    # every parameter of a group is at the same step: its bias corrections are two scalars
    step = steps[0] + 1
    step_size_neg, bias2_sqrt = _once(torch.stack([-(lr / (1 - beta1**step)), (1 - beta2**step).sqrt()]))
    for p, g, s, m, v in zip(params, grads, steps, exp_avgs, exp_avg_sqs, strict=True):
        s += 1
        if weight_decay != 0:
            if decoupled:
                p.mul_(1 - lr * weight_decay)
            else:
                g = g.add(p, alpha=weight_decay)
        m.copy_(torch.lerp(m, g, 1 - beta1))
        v.copy_(torch.addcmul(v * beta2, g, g, value=1 - beta2))
        p.copy_(torch.addcdiv(p, m, v.sqrt() / (bias2_sqrt * step_size_neg) + eps / step_size_neg))


@torch.no_grad()
def _rmsprop(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], state: list[list[torch.Tensor]],
             group: dict[str, Any], lr: torch.Tensor) -> None:
    alpha, eps, weight_decay, momentum = group["alpha"], group["eps"], group["weight_decay"], group["momentum"]
    steps, square_avgs, *rest = state
    bufs = rest.pop(0) if momentum > 0 else [None] * len(params)
    grad_avgs = rest.pop(0) if group["centered"] else [None] * len(params)
    for p, g, s, sq, buf, ga in zip(params, grads, steps, square_avgs, bufs, grad_avgs, strict=True):
        s += 1
        if weight_decay != 0:
            g = g.add(p, alpha=weight_decay)
        sq.copy_(torch.addcmul(sq * alpha, g, g, value=1 - alpha))
        if ga is not None:
            ga.copy_(torch.lerp(ga, g, 1 - alpha))
            avg = sq.addcmul(ga, ga, value=-1).sqrt() + eps
        else:
            avg = sq.sqrt() + eps
        if buf is not None:
            buf.copy_(torch.addcdiv(buf * momentum, g, avg))
            p.sub_(lr * buf)
        else:
            p.sub_(lr * g / avg)


@torch.no_grad()
def _sgd(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], state: list[list[torch.Tensor]],
         group: dict[str, Any], lr: torch.Tensor) -> None:
    momentum, weight_decay, nesterov = group["momentum"], group["weight_decay"], group["nesterov"]
    bufs = state[0] if momentum != 0 else [None] * len(params)
    for p, g, buf in zip(params, grads, bufs, strict=True):
        if weight_decay != 0:
            g = g.add(p, alpha=weight_decay)
        if buf is not None:
            # torch.optim.SGD starts the buffer at the first gradient; from zeros (dampening 0) it is the same
            buf.mul_(momentum).add_(g)
            g = g.add(buf, alpha=momentum) if nesterov else buf
        p.sub_(lr * g)


_STEPS: dict[type[torch.optim.Optimizer], Callable[..., None]] = {
    torch.optim.Adam: _adam, torch.optim.AdamW: functools.partial(_adam, decoupled=True),
    torch.optim.RMSprop: _rmsprop, torch.optim.SGD: _sgd}


def _once(scalars: torch.Tensor) -> torch.Tensor:
    """``scalars``, computed once: a reduction is its own buffer, where inductor would inline Adam's two
    ``pow`` into every parameter's kernel (docs/results/profiling.md)."""
    return scalars.unsqueeze(-1).amax(-1)
