import pytest
import torch
from helpers import params_of, tiny_cfg

from rlsweep.runner import train
from rlsweep.testing.algorithm import initial_parameters
from rlsweep.toggles.dtype import DtypeToggle

from .contract import ToggleContract


class TestDtype(ToggleContract):
    toggle = DtypeToggle


def test_bfloat16_in_the_single_graph_update_of_sac() -> None:
    """The bench runs SAC with bfloat16 AND its compiled one-graph update where bfloat16 matmuls are
    native: the compiled step must train like the eager bfloat16 step (autograd + torch.optim)."""
    init = initial_parameters(tiny_cfg("sac"))
    eager = train(tiny_cfg("sac", "dtype=bfloat16"))
    compiled = train(tiny_cfg("sac", "dtype=bfloat16", "compile=default", "compile.functions=[update]"))
    assert compiled.algo.update.single_graph and not eager.algo.update.single_graph
    assert compiled.updates == eager.updates > 0
    flat = {name: torch.cat([p[k].flatten() for k in sorted(p)]) for name, p in
            (("eager", params_of(eager.algo)), ("compiled", params_of(compiled.algo)), ("init", init))}
    moved = (flat["eager"] - flat["init"]).norm()
    assert moved > 0
    assert (flat["compiled"] - flat["eager"]).norm() <= TestDtype.drift * moved


def test_output_layers_stay_float32_under_autocast() -> None:
    from rlsweep.nets import OutputLinear, mlp
    from rlsweep.runtime import Runtime

    torch.manual_seed(0)
    net = mlp(3, [16], 2, Runtime(torch.device("cpu")), "relu")
    assert isinstance(net[-1], OutputLinear) and not isinstance(net[0], OutputLinear)
    x = torch.randn(5, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = net[:-1](x)
        out = net(x)
    assert hidden.dtype == torch.bfloat16  # the hidden layers keep the reduced precision...
    assert out.dtype == torch.float32  # ...the output layer computes in float32 from their output
    torch.testing.assert_close(out, torch.nn.functional.linear(hidden.float(), net[-1].weight, net[-1].bias),
                               rtol=0, atol=0)
    plain = torch.nn.Linear(16, 2)
    plain.load_state_dict(net[-1].state_dict())
    h = torch.randn(5, 16)
    assert torch.equal(net[-1](h), plain(h))  # without autocast: exactly nn.Linear


@pytest.mark.parametrize(("algo", "optimizers"), [("ppo", 1), ("dqn", 1), ("sac", 3)])
def test_float16_steps_every_optimizer_through_a_grad_scaler(algo: str, optimizers: int, monkeypatch) -> None:
    """float16 uses a GradScaler in every algorithm (on CUDA, where the dtype toggle asks for one).

    There is no GPU here, so the scaler the runtime hands out is a CPU one; what is checked is that
    each algorithm's update routes every optimizer's step through it.
    """
    import collections

    from rlsweep.runtime import Runtime

    monkeypatch.setattr(Runtime, "grad_scaler", lambda self: torch.amp.GradScaler("cpu", init_scale=2.0**10)
                        if self.settings.autocast_dtype is torch.float16 else None)
    steps: collections.Counter[int] = collections.Counter()
    updates = collections.Counter()
    step, update = torch.amp.GradScaler.step, torch.amp.GradScaler.update

    def counting_step(self, optimizer, *args, **kwargs):
        steps[id(optimizer)] += 1
        return step(self, optimizer, *args, **kwargs)

    def counting_update(self, *args, **kwargs):
        updates["update"] += 1
        return update(self, *args, **kwargs)

    monkeypatch.setattr(torch.amp.GradScaler, "step", counting_step)
    monkeypatch.setattr(torch.amp.GradScaler, "update", counting_update)
    record = train(tiny_cfg(algo, "dtype=float16")).record()
    assert len(steps) == optimizers
    assert len(set(steps.values())) == 1 and updates["update"] == next(iter(steps.values()))  # one update per step
    assert record["learning"]["final_return"] is not None


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_float16_loss_scale_resumes_from_the_checkpoint(algo: str, tmp_path, monkeypatch) -> None:
    """Every update's GradScaler (TD3 has two) is in the checkpoint: a resumed job continues its loss scale."""
    import os
    import signal

    from rlsweep.runtime import Runtime
    from rlsweep.signals import Interrupted

    # a CPU stand-in for CUDA's scaler whose scale moves during a tiny job (doubles every 16 steps)
    monkeypatch.setattr(Runtime, "grad_scaler", lambda self: torch.amp.GradScaler("cpu", init_scale=2.0,
                                                                                  growth_interval=16)
                        if self.settings.autocast_dtype is torch.float16 else None)
    straight = train(tiny_cfg(algo, "dtype=float16"))
    calls = {"n": 0}

    def stop_after_two(row: dict, env_steps: int) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            os.kill(os.getpid(), signal.SIGINT)

    ckpt = tmp_path / "checkpoint.pt"
    with pytest.raises(Interrupted):
        train(tiny_cfg(algo, "dtype=float16"), on_iteration=stop_after_two, checkpoint_path=ckpt)
    resumed = train(tiny_cfg(algo, "dtype=float16"), checkpoint_path=ckpt)

    def scales(out) -> list[float]:
        return [u.scaler.get_scale() for u in out.algo.rt._updates]

    assert resumed.requeues == 1
    assert scales(resumed) == scales(straight) and min(scales(straight)) > 2.0, (scales(resumed), scales(straight))
