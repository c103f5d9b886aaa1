"""nets.MLP runs its layers' torch ops itself: it must compute exactly what nn.Sequential computes."""

import copy

import pytest
import torch
from torch import nn

from rlsweep.nets import MLP, mlp
from rlsweep.runtime import Runtime


def _net(activation: str, inplace: bool) -> MLP:
    rt = Runtime(torch.device("cpu"))
    rt.settings.inplace = inplace
    torch.manual_seed(0)
    return mlp(3, [16, 8], 2, rt, activation)


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("inplace", [False, True])
def test_forward_is_sequentials_with_gradients(activation: str, inplace: bool) -> None:
    net = _net(activation, inplace)
    plain = nn.Sequential(*net)  # the same layer objects, run by nn.Sequential's own forward
    x = torch.randn(5, 3)
    out, ref = net(x), plain(x)
    assert torch.equal(out, ref)
    grads = torch.autograd.grad(out.square().sum(), list(net.parameters()))
    ref_grads = torch.autograd.grad(plain(x).square().sum(), list(plain.parameters()))
    for g, r in zip(grads, ref_grads, strict=True):
        assert torch.equal(g, r)


def test_functional_call_swaps_the_parameters_it_reads() -> None:
    """Parameters are read at call time: functional_call's tensors are used, and gradients reach them."""
    net = _net("tanh", False)
    other = {n: torch.randn_like(p, requires_grad=True) for n, p in net.named_parameters()}
    x = torch.randn(4, 3)
    out = torch.func.functional_call(net, other, (x,))
    expected = nn.Sequential(*copy.deepcopy(net))  # its own layers: net keeps its parameters
    with torch.no_grad():
        for n, p in expected.named_parameters():
            p.copy_(other[n])
    assert torch.equal(out, expected(x))
    assert not torch.equal(out, net(x))
    out.sum().backward()
    assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in other.values())


def test_other_layer_types_run_their_own_forward() -> None:
    net = _net("relu", False)
    net.append(nn.Softmax(dim=-1))
    x = torch.randn(6, 3)
    out = net(x)
    torch.testing.assert_close(out.sum(-1), torch.ones(6))
    assert torch.equal(out, nn.Sequential(*net)(x))


def test_mlp_init_is_orthogonal_or_torchs_own() -> None:
    import math

    from rlsweep.nets import mlp
    from rlsweep.runtime import Runtime

    torch.manual_seed(0)
    rt = Runtime(torch.device("cpu"))
    ortho = mlp(64, [64], 4, rt, "relu")
    plain = mlp(64, [64], 4, rt, "relu", init="torch")
    w_o, w_p = ortho[0].weight.detach(), plain[0].weight.detach()
    assert torch.allclose(w_o @ w_o.T, 2.0 * torch.eye(64), atol=1e-4)  # orthogonal, gain sqrt(2)
    assert w_p.abs().max() <= 1 / math.sqrt(64) and not torch.allclose(w_p @ w_p.T, 2.0 * torch.eye(64), atol=0.1)
    assert float(ortho[0].bias.abs().max()) == 0.0 and float(plain[0].bias.abs().max()) > 0.0  # torch's bias is uniform
    with pytest.raises(ValueError, match="init='xavier'"):
        mlp(4, [4], 2, rt, "relu", init="xavier")


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("inplace", [False, True])
def test_inference_fn_computes_the_forward_and_sees_in_place_updates(activation: str, inplace: bool) -> None:
    net = _net(activation, inplace)
    fn = net.inference_fn()
    assert fn is not None
    x = torch.randn(8, 3)
    with torch.inference_mode():
        assert torch.equal(fn(x), net(x))
    with torch.no_grad():  # an optimizer step: in place, the same Parameter objects
        for p in net.parameters():
            p.add_(0.1)
    with torch.inference_mode():
        assert torch.equal(fn(x), net(x))


def test_inference_fn_declines_autocast_and_other_layers() -> None:
    net = _net("relu", False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert net.inference_fn() is None  # the output layer leaves autocast: forward() knows how
    net.append(nn.Softmax(dim=-1))
    assert net.inference_fn() is None
