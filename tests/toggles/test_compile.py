import pytest
import torch
from helpers import params_of, tiny_cfg

from rlsweep.runner import train
from rlsweep.toggles.compile import CompileConfig, CompileToggle

from .contract import ToggleContract, reference_params

BUILTIN = ("ppo", "dqn", "sac")


class TestCompile(ToggleContract):
    toggle = CompileToggle


@pytest.mark.parametrize("algo", BUILTIN)
def test_compiles_only_the_selected_functions(algo: str) -> None:
    """compile.functions=[update]: the gradient step is compiled (and still matches eager), acting stays eager."""
    out = train(tiny_cfg(algo, "compile=default", "compile.functions=[update]"))
    assert set(out.compile["per_function"]) == {"update"}
    assert out.compile["per_function"]["update"]["compilations"] >= 1
    assert out.compile["graph_breaks"] == 0 and out.compile["recompiles"] == 0
    p0 = reference_params(algo)[2]
    p1 = params_of(out.algo)
    for k in p0:
        torch.testing.assert_close(p1[k], p0[k], rtol=TestCompile.rtol, atol=TestCompile.atol)


def test_cpp_wrapper_generates_a_cpp_wrapper_and_keeps_the_mode() -> None:
    """compile.cpp_wrapper=true: the graph's kernels are called from generated C++, with the mode's options."""
    from torch._inductor.utils import run_and_get_code

    from rlsweep.compile_stats import CompileStats
    from rlsweep.runtime import Runtime

    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ x.T).sum(-1) + 1.0

    codes = {}
    for cpp in (False, True):
        torch._dynamo.reset()
        rt = Runtime(torch.device("cpu"))
        rt.settings.compile_config = CompileConfig(mode="default", functions=["update"], cpp_wrapper=cpp)
        rt.compile_stats = CompileStats()
        x = torch.randn(8, 8)
        out, code = run_and_get_code(rt.compile(step, "update"), x)
        torch.testing.assert_close(out, step(x))
        codes[cpp] = "\n".join(code)
    torch._dynamo.reset()  # also drops the stats' callbacks (run_and_get_code resets dynamo itself)
    assert "extern_kernels" in codes[False] and "inductor_entry_impl" not in codes[False]
    assert "inductor_entry_impl" in codes[True]  # the C++ entry point of a cpp_wrapper graph


@pytest.mark.parametrize("algo", BUILTIN)
def test_cpp_wrapper_matches_eager(algo: str) -> None:
    out = train(tiny_cfg(algo, "compile=default", "compile.functions=[update]", "compile.cpp_wrapper=true"))
    assert out.compile["per_function"]["update"]["compilations"] >= 1
    assert out.compile["graph_breaks"] == 0 and out.compile["recompiles"] == 0
    p0, p1 = reference_params(algo)[2], params_of(out.algo)
    for k in p0:
        torch.testing.assert_close(p1[k], p0[k], rtol=TestCompile.rtol, atol=TestCompile.atol)


@pytest.mark.parametrize("algo", BUILTIN)
def test_guards_are_skipped_in_the_steady_iterations_only(algo: str) -> None:
    """compile.skip_guards_after_warmup=true: warm-up iterations check dynamo's guards (and compile),
    steady ones skip them and dynamo's frame hook; the stance is restored after training and the numbers
    match eager."""
    import torch._dynamo.eval_frame as eval_frame

    seen = []
    out = train(tiny_cfg(algo, "compile=default", "compile.skip_guards_after_warmup=true"),
                on_iteration=lambda row, _: seen.append((row["perf/steady_state"],
                                                         eval_frame._stance.skip_guard_eval_unsafe)))
    assert {steady for steady, _ in seen} == {0, 1}
    # skipped in steady iterations only, from the one after which every compiled function has
    # compiled (under that stance dynamo refuses to compile): SAC acts first after learning starts
    skipping = [skipped for _, skipped in seen]
    assert skipping[-1] and skipping == sorted(skipping), seen
    assert all(steady for steady, skipped in seen if skipped), seen
    assert eval_frame._stance.skip_guard_eval_unsafe is False
    assert out.compile["recompiles"] == 0 and out.compile["graph_breaks"] == 0
    # and there, each compiled function ran dynamo's code for it directly, without dynamo's frame hook
    assert all(fn["direct_calls"] > 0 for fn in out.compile["per_function"].values()), out.compile
    p0, p1 = reference_params(algo)[2], params_of(out.algo)
    for k in p0:
        torch.testing.assert_close(p1[k], p0[k], rtol=TestCompile.rtol, atol=TestCompile.atol)


def test_the_compile_cache_folder_comes_from_the_config_then_torch_then_the_user_cache(tmp_path, monkeypatch) -> None:
    from rlsweep.toggles.compile import compile_cache_dir

    assert compile_cache_dir(str(tmp_path / "c"), {"TORCHINDUCTOR_CACHE_DIR": "/x"}) == str(tmp_path / "c")
    assert compile_cache_dir(None, {"TORCHINDUCTOR_CACHE_DIR": "/x", "XDG_CACHE_HOME": "/y"}) == "/x"
    assert compile_cache_dir(None, {"XDG_CACHE_HOME": "/y"}) == "/y/rlsweep/torch_compile"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert compile_cache_dir(None, {}) == str(tmp_path / ".cache" / "rlsweep" / "torch_compile")


def test_inductors_own_default_in_the_environment_is_not_taken_for_the_users_choice(tmp_path, monkeypatch) -> None:
    """Inductor sets TORCHINDUCTOR_CACHE_DIR to its /tmp default when it first opens its caches: a later
    job of the same process (or a job process started from it) must not read that as the user's folder."""
    import os

    from torch._inductor.runtime.cache_dir_utils import cache_dir, default_cache_dir

    from rlsweep.toggles.compile import claim_cache_env, compile_cache_dir

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache_dir()  # what inductor does on first use
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == os.path.abspath(default_cache_dir())
    assert compile_cache_dir(None) == str(tmp_path / "rlsweep" / "torch_compile")
    claim_cache_env()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "rlsweep" / "torch_compile")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))  # the user's own stays
    claim_cache_env()
    assert compile_cache_dir(None) == os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")


@pytest.mark.slow  # a cold compile into a fresh folder: a minute on 2 cores
def test_a_job_compiles_into_its_cache_folder_and_leaves_the_environment_as_it_was(tmp_path, monkeypatch) -> None:
    import os
    import threading

    from torch._inductor import cpu_vec_isa

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    # where inductor's vector-ISA probe loads its test kernels: in rlsweep's thread, never in the compiling one
    loads: list[str] = []
    probe_load = cpu_vec_isa.VecISA._probe_load
    monkeypatch.setattr(cpu_vec_isa.VecISA, "_probe_load",
                        lambda self, path: loads.append(threading.current_thread().name) or probe_load(self, path))
    cache = tmp_path / "cache"
    record = train(tiny_cfg("dqn", "compile=default", "compile.functions=[update]", f"compile.cache_dir={cache}")).record()
    info = record["compile"]["cache"]
    assert info["dir"] == str(cache) and info["fxgraph_hits"] + info["fxgraph_misses"] >= 1
    assert any(cache.rglob("*")), "nothing was written to the configured cache folder"
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ
    if "TORCHINDUCTOR_VEC_ISA_OK" not in os.environ:
        assert info["vec_isa"] in ("probed", "cached") and set(loads) <= {"rlsweep-vec-isa"}, loads
    assert train(tiny_cfg("dqn")).record()["compile"]["cache"] is None  # eager: no compile, no cache figures


@pytest.mark.slow
def test_a_second_process_with_its_own_tmp_reuses_what_the_first_compiled(tmp_path) -> None:
    """Compile once per cluster: a job on another node (its own /tmp) reuses the shared cache folder."""
    import json
    import os

    from helpers import run_train

    cache = tmp_path / "shared_cache"
    records = []
    for node in ("node_a", "node_b"):
        tmp = tmp_path / node / "tmp"
        tmp.mkdir(parents=True)
        out = tmp_path / node / "run"
        proc = run_train(["experiment=smoke", "compile=default", "compile.functions=[update]", "progress=false",
                          "logger.mode=disabled", "total_env_steps=1024", f"compile.cache_dir={cache}",
                          f"hydra.run.dir={out}"],
                         env={**os.environ, "TMPDIR": str(tmp)})
        assert proc.returncode == 0, proc.stderr[-3000:]
        records.append(json.loads((out / "result.json").read_text())["compile"]["cache"])
    cold, warm = records
    assert cold["fxgraph_misses"] >= 1 and cold["served_from_cache"] < 1.0
    assert warm["fxgraph_misses"] == 0 and warm["fxgraph_hits"] >= 1 and warm["served_from_cache"] == 1.0
    assert warm["aot_autograd_hits"] >= 1
    if "TORCHINDUCTOR_VEC_ISA_OK" not in os.environ:  # the CPU's vector ISA is probed once, then trusted
        assert cold["vec_isa"] == "probed" and warm["vec_isa"] == "cached"


class _Isa:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name


@pytest.fixture
def vec_isa_unset():
    """inductor's cpp.vec_isa_ok unset for the test and put back after (plain assignment: pytest's
    monkeypatch deletes through torch's config proxy on undo, which removes the key itself)."""
    from torch._inductor import config as inductor_config

    before = inductor_config.cpp.vec_isa_ok
    inductor_config.cpp.vec_isa_ok = None
    yield
    inductor_config.cpp.vec_isa_ok = before


def _fake_probe(monkeypatch, probed: list[str], reported: list[str]) -> list[int]:
    """inductor's probe finds ``probed`` usable of the ``reported`` ISAs; returns a call counter."""
    from torch._inductor import config as inductor_config
    from torch._inductor import cpu_vec_isa

    calls = [0]

    def valid() -> list[_Isa]:  # counts the probes: trusted, it only lists the reported ISAs
        if inductor_config.cpp.vec_isa_ok:
            return [_Isa(n) for n in reported]
        calls[0] += 1
        return [_Isa(n) for n in probed]

    valid.__wrapped__ = lambda: [_Isa(n) for n in (reported if inductor_config.cpp.vec_isa_ok else probed)]
    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", valid)
    return calls


def test_the_vector_isa_verdict_is_kept_when_every_isa_passed_and_trusted_by_the_next_job(tmp_path, monkeypatch,
                                                                                           vec_isa_unset) -> None:
    from torch._inductor import config as inductor_config

    from rlsweep.toggles.compile import VEC_ISA_DIR, VecIsaProbe, prepare_vec_isa

    calls = _fake_probe(monkeypatch, ["avx512", "avx2"], ["avx512", "avx2"])
    assert prepare_vec_isa(str(tmp_path)) == "probed" and calls[0] == 1
    assert inductor_config.cpp.vec_isa_ok is None  # this job's own probe decided; nothing to trust yet
    assert len(list((tmp_path / VEC_ISA_DIR).glob("*.json"))) == 1
    assert prepare_vec_isa(str(tmp_path)) == "cached" and calls[0] == 1  # no second probe
    # the next job: its probe thread finds the verdict; nothing changes in the compiling thread
    # (a changed inductor setting would change every compiled graph's cache key)
    probe = VecIsaProbe(str(tmp_path))
    assert probe.ready() == "cached" and probe.ready() == "cached" and calls[0] == 1
    assert inductor_config.cpp.vec_isa_ok is None


def test_a_rejected_vector_isa_leaves_no_verdict_so_every_job_probes(tmp_path, monkeypatch, vec_isa_unset) -> None:
    from torch._inductor import config as inductor_config

    from rlsweep.toggles.compile import VEC_ISA_DIR, prepare_vec_isa

    calls = _fake_probe(monkeypatch, ["avx2"], ["avx512", "avx2"])  # the compiler could not build avx512
    assert prepare_vec_isa(str(tmp_path)) == "probed"
    assert not (tmp_path / VEC_ISA_DIR).exists()
    assert prepare_vec_isa(str(tmp_path)) == "probed" and calls[0] == 2
    assert inductor_config.cpp.vec_isa_ok is None
    inductor_config.cpp.vec_isa_ok = False  # TORCHINDUCTOR_VEC_ISA_OK=0: the user's word (the fixture undoes it)
    assert prepare_vec_isa(str(tmp_path)) == "user" and calls[0] == 2


def test_the_vector_isa_probe_thread_imports_nothing(tmp_path) -> None:
    """Every module the real probe needs is imported before its thread starts: a thread importing
    setuptools (which adds and removes an import finder) beside the job's imports made one of those
    fail. In a fresh process, as a job starts."""
    import subprocess
    import sys

    # through VecIsaProbe, as a job starts it: what is loaded when its thread starts, against what
    # is loaded once it is done (the main thread imports nothing while it waits)
    code = ("import sys, threading, torch\n"
            "from rlsweep.toggles.compile import VecIsaProbe\n"
            "at_start, start = [], threading.Thread.start\n"
            "threading.Thread.start = lambda self: (at_start.append(set(sys.modules)), start(self))[1]\n"
            f"probe = VecIsaProbe({str(tmp_path)!r})\n"
            "assert probe.ready() in ('probed', 'cached'), probe.ready()\n"
            "print(sorted(set(sys.modules) - at_start[0]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "TORCHINDUCTOR_VEC_ISA_OK": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("algo", ["ppo", "dqn", "sac"])
def test_cuda_graph_modes_train_on_cuda(algo: str) -> None:
    # a CUDA graph reuses its output memory at each replay: the algorithms keep outputs past the next
    # call (PPO's epoch statistics), which torch refused on the first GPU run of compile=reduce-overhead
    out = train(tiny_cfg(algo, "device=cuda", "compile=reduce-overhead"))
    assert out.updates > 0 and out.compile["mode"] == "reduce-overhead"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("algo", ["ppo", "dqn", "sac"])
def test_steady_calls_on_cuda_run_the_compiled_code_directly(algo: str) -> None:
    """On a GPU too, skipping the guards calls the compiled code directly (no CUDA graphs: compile=default),
    and the numbers match eager."""
    out = train(tiny_cfg(algo, "device=cuda", "compile=default", "compile.skip_guards_after_warmup=true"))
    assert all(fn["direct_calls"] > 0 for fn in out.compile["per_function"].values()), out.compile
    p0, p1 = reference_params(algo, "device=cuda")[2], params_of(out.algo)
    for k in p0:
        torch.testing.assert_close(p1[k], p0[k], rtol=TestCompile.rtol, atol=TestCompile.atol)
