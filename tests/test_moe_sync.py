"""The MoE dispatcher's host synchronisation as a restarted launch pipeline (issue 15; docs/moe.md, "The
dispatcher's host synchronisation").

- :func:`dse.formulas.kernels.stream_time` equals a kernel-by-kernel simulation of one CUDA stream fed by the host
  (f_j = max(f_(j-1), H_j) + g_j), and its limits: GPU-bound one launch more than the GPU, host-bound the host and
  the last kernel;
- :func:`dse.formulas.kernels.restart_exposed_time`: one launch when GPU-bound, up to the sum when the host-heavy rows
  follow the wait and the GPU-heavy ones precede it;
- the four MoE validation cases (GPT-OSS-120B, Qwen3-30B-A3B FP8, Mixtral 8x7B, DeepSeek-V3): at the reference
  host's launch time (13.5 us) their layers are GPU-bound after the wait, so it adds one launch; at their systems'
  host (dgx-h100-host, 4.17x: 56.3 us a launch) what the wait adds is the restarted pipeline's own time; the same
  with Megatron-Core's MoE layer's measured host time (data/host_moe_cpu.json);
- Transformers 5.24's MoE blocks (Mixtral, Qwen3-MoE, GPT-OSS) under the default ``grouped_mm`` experts make no
  host synchronisation (``eager`` makes one per layer and two per expert hit), so the pytorch stack prices none.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dse.catalog import data_dir
from dse.formulas import kernels as K

D = 13.5e-6   # stacks/megatron.yaml: host time per launch on the reference host (dispatch_scale 1)
#: the validation cases' host scale: dgx-h100-host's dispatch_scale, transferred from the measured H100 VM
S = 4.17


def simulate(host, gpu, kernels):
    """Kernel by kernel: each row's n kernels of host h/n and GPU g/n; kernel j issued at H_j runs after j-1."""
    t_host = t_gpu = 0.0
    for h, g, n in zip(host, gpu, kernels):
        n = max(int(n), 1)
        for _ in range(n):
            t_host += h / n
            t_gpu = max(t_gpu, t_host) + g / n
    return t_gpu


rows = st.lists(st.tuples(st.floats(0, 1e-3), st.floats(0, 5e-3), st.integers(1, 20)), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(rows)
def test_stream_time_is_the_stream_simulated_kernel_by_kernel(r):
    host, gpu, n = zip(*r)
    t = K.stream_time(host, gpu, n)
    assert t == pytest.approx(simulate(host, gpu, n), rel=1e-9, abs=1e-15)
    assert max(sum(host), sum(gpu)) - 1e-15 <= t <= sum(host) + sum(gpu) + 1e-15


def test_limits():
    # GPU-bound: one launch, then the GPU's work; the exposed time of the wait is that launch, however many rows
    host, gpu, n = [D, 20 * D, 3 * D], [1e-3, 2e-3, 0.5e-3], [1, 20, 3]
    assert K.stream_time(host, gpu, n) == pytest.approx(D + 3.5e-3)
    assert K.restart_exposed_time(host, gpu, n) == pytest.approx(D)
    # host-bound throughout: the host's work, then the last kernel
    host, gpu = [1e-3, 2e-3, 3e-3], [1e-4, 1e-4, 3e-4]
    assert K.stream_time(host, gpu, [1, 1, 3]) == pytest.approx(6e-3 + 1e-4)
    assert K.restart_exposed_time(host, gpu, [1, 1, 3]) == pytest.approx(1e-4)
    # host-heavy rows right after the wait, GPU-heavy rows right before the next: nothing overlaps, the sum
    host, gpu = [2e-3, 1e-9], [1e-9, 2e-3]
    assert K.stream_time(host, gpu, [1000, 1]) == pytest.approx(4e-3, rel=1e-5)
    # the same rows the other way round (GPU-heavy first): they hide each other, max(sum h, sum g) + one launch
    assert K.stream_time(host[::-1], gpu[::-1], [1, 1000]) == pytest.approx(1e-9 + 2e-3 + 1e-9, rel=1e-6)


def test_arrays_broadcast():
    s = np.array([1.0, 4.0])   # a host 1x and 4x slower per launch
    gpu, n = [0.4e-3, 0.5e-3, 1.5e-3], [1, 60, 30]
    t = K.restart_exposed_time([D * s, 60 * D * s, 30 * D * s], gpu, n)
    assert t.shape == (2,) and t[0] == pytest.approx(D)
    assert t[1] == pytest.approx(K.restart_exposed_time([4 * D, 240 * D, 120 * D], gpu, n))


def test_where_megatron_waits():
    moe = dict(experts=128, experts_per_token=4, expert_ffn=256)
    table = K.moe_mlp_kernels(4096, 1, 1024, ep=8, **moe)
    assert K.moe_sync_row(table) == "ep_dispatch"                # before_ep_alltoall: ep > 1
    assert K.moe_sync_row(K.moe_mlp_kernels(4096, 1, 1024, **moe)) == "expert_fc1"   # before_finish
    # ep 1, expert TP 2: before_ep_alltoall too (the dispatcher's tp_size is the expert-TP group's), so the wait
    # precedes dispatch_postprocess's all-gather over that group (a search's vectorised ep kept it there already)
    folded = K.moe_mlp_kernels(4096, 1, 1024, tp=2, etp=2, sequence_parallel=True, **moe)
    assert K.moe_sync_row(folded) == "expert_allreduce"
    assert K.moe_sync_row(K.layer_kernels(4096, 1, 1024, 8, 8, 128, 4096)) is None   # dense: no router


@pytest.fixture(scope="module")
def synced():
    """Per MoE validation case: the rows moe_sync_time orders (host, GPU, launches), the layer's forward GPU time
    and launches, the exposed time."""
    from dse.estimate import kernel_table as kt
    from dse.validate import deepseek_v3, megatron_bridge as mb, moe

    out = {}
    orig_time, orig_exposed = kt.moe_sync_time, K.restart_exposed_time
    try:
        for name, run in [*((c, lambda c=c: mb.tokens_per_gpu(c)) for c in mb.MOE_ROWS),
                          ("mixtral", moe.cases()[0].compute), ("deepseek-v3", deepseek_v3.cases()[0].compute)]:
            seen: list = []

            def exposed(host, gpu, kernels, _seen=seen):
                _seen.append((host, gpu, kernels))
                return orig_exposed(host, gpu, kernels)

            def timed(table, rows, dispatch, overhead=0.0, _seen=seen):
                value = orig_time(table, rows, dispatch, overhead)
                _seen.append((table, dict(rows), dispatch, value))
                return value

            K.restart_exposed_time, kt.moe_sync_time = exposed, timed
            kt._TIMES.clear()
            run()
            out[name] = seen[0], seen[1]
    finally:
        K.restart_exposed_time, kt.moe_sync_time = orig_exposed, orig_time
        kt._TIMES.clear()
    return out


CASES = ["h100_gpt_oss_120b_gbs1280", "h100_qwen3_30b_a3b_gbs1024", "mixtral", "deepseek-v3"]


@pytest.mark.parametrize("case", CASES)
def test_validation_layers_are_gpu_bound_after_the_wait(synced, case):
    """Every row is counted once (the FP8 casts moved before their GEMMs: same time, same launches), the post-wait
    part comes first, the systems' host launches at 4.17 x 13.5 us, and at the reference host's 13.5 us the wait
    costs one launch (the post-wait rows GPU-bound)."""
    (host, gpu, kernels), (table, rows, dispatch, value) = synced[case]
    assert dispatch == pytest.approx(S * D)
    assert sum(gpu) == pytest.approx(sum(g for g, _ in rows.values()))
    assert sum(kernels) == pytest.approx(sum(n for _, n in rows.values()))
    assert sum(host) == pytest.approx(S * D * sum(kernels))
    first = K.moe_sync_row(table)
    assert first == "ep_dispatch" and gpu[0] == rows[first][0]
    assert value == pytest.approx(K.restart_exposed_time(host, gpu, kernels), rel=1e-9)
    reference = [h / S for h in host]
    assert K.restart_exposed_time(reference, gpu, kernels) == pytest.approx(D, rel=1e-6)
    assert value >= S * D * (1 - 1e-9)        # never less than the launch after the wait


def test_fp8_casts_of_the_experts_run_after_the_wait(synced):
    """Qwen3-30B-A3B, FP8 current scaling: 8 local experts, 3 cast kernels each (amax, scale, cast) before fc1 and
    before fc2, follow the dispatch; the casts of the attention's QKV and output inputs (3 each) precede the wait."""
    (_, _, kernels), (table, rows, _, _) = synced["h100_qwen3_30b_a3b_gbs1024"]
    assert table["expert_fc1"]["cast"][1] == table["expert_fc2"]["cast"][1] == 24
    assert rows["fp8_cast"][1] == 24 + 24 + 3 + 3
    assert tuple(kernels[:6]) == (1, 24, 8, 1, 24, 8)   # dispatch, casts, fc1, activation, casts, fc2
    assert list(kernels[6:]).count(3) >= 2


def test_slower_host_exposes_the_wait(synced):
    """The mechanism where it bites: Qwen3's layer with the host 2x slower per launch than the reference becomes
    host-bound after the wait while its attention stays GPU-bound before it, and the wait costs far more than a
    launch."""
    (host, gpu, kernels), _ = synced["h100_qwen3_30b_a3b_gbs1024"]
    slow = [2 * h / S for h in host]
    assert max(sum(slow), sum(gpu)) == sum(gpu)      # not host-bound over the layer as a whole
    assert K.restart_exposed_time(slow, gpu, kernels) > 10 * 2 * D


def _host_moe():
    return json.loads((data_dir() / "host_moe_cpu.json").read_text())["rows"]


@pytest.mark.parametrize("case, experts", [("h100_gpt_oss_120b_gbs1280", 16), ("h100_qwen3_30b_a3b_gbs1024", 8)])
def test_measured_megatron_host_time_leaves_the_layer_gpu_bound(synced, case, experts):
    """Megatron-Core's MoE layer measured on the reference host (data/host_moe_cpu.json: 355 + 58.5 E us forward,
    all of it put after the wait, the worst case; cudaLaunchKernel 2.5 us per launch dse counts) with the dense
    layer's attention part before it: the wait still costs the first launch only (the dispatch's 426 or 256 us of
    GPU time come first and the expert loop's host work hides behind the combine and the next attention)."""
    from tests.test_host_moe import CUDA_LAUNCH_US, fit

    (host, gpu, kernels), (table, rows, _, _) = synced[case]
    names = [n for n in rows if n != "fp8_cast"]
    pre = names[:names.index("ep_dispatch")]
    split = len(kernels) - len(pre) - sum("cast" in table[n] and "fp8_cast" in rows for n in pre)
    l_post, g_post, g_pre = sum(kernels[:split]), sum(gpu[:split]), sum(gpu[split:])
    (a, b), _ = fit("forward_us")
    dense = next(r for r in _host_moe() if r["module"] == "TransformerLayer" and r["experts"] == 0)
    mlp = next(r for r in _host_moe() if r["module"] == "MLP")
    h_post = (a + b * experts + CUDA_LAUNCH_US * l_post) * 1e-6
    h_pre = (dense["forward_us"] - mlp["forward_us"] + CUDA_LAUNCH_US * (sum(kernels) - l_post)) * 1e-6
    # two segments: the MoE part after the wait (its host time spread over its launches), the attention before it
    seg = [(h_post, g_post, l_post), (h_pre, g_pre, sum(kernels) - l_post)]
    exposed = K.restart_exposed_time(*zip(*seg))
    assert h_post + max(h_pre, g_pre) < sum(gpu)
    assert exposed == pytest.approx(h_post / l_post, rel=1e-6)


@pytest.mark.torch
@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe", "gpt_oss"])
def test_transformers_moe_syncs_only_with_eager_experts(family):
    """Transformers 5.24's MoE layers, the real code on the CPU build of torch under a TorchDispatchMode counting
    the ops whose result size or value the host needs (``nonzero``, ``_local_scalar_dense``: a device-to-host
    synchronisation on a GPU): the default ``experts_implementation`` (``grouped_mm``: histc, cumsum, the grouped
    GEMM with the offsets on the device) makes none, forward or backward, which is what dse prices for the pytorch
    stack; ``eager`` makes a ``nonzero`` per layer and one per expert hit (``torch.where`` on its mask), and reads
    the expert index on the host."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    class Syncs(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ in ("nonzero", "_local_scalar_dense", "item", "unique", "masked_select"):
                self.n[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    layers, experts = 2, 8
    common = dict(hidden_size=16, intermediate_size=16, num_hidden_layers=layers, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=8, vocab_size=64, max_position_embeddings=64, num_experts_per_tok=2)
    cfg = {"mixtral": lambda: transformers.MixtralConfig(**common, num_local_experts=experts),
           "qwen3_moe": lambda: transformers.Qwen3MoeConfig(**common, num_experts=experts, moe_intermediate_size=16),
           "gpt_oss": lambda: transformers.GptOssConfig(**common, num_local_experts=experts, sliding_window=8)}[family]
    counts = {}
    for impl in (None, "eager"):
        torch.manual_seed(0)
        kw = {} if impl is None else {"experts_implementation": impl}
        model = transformers.AutoModelForCausalLM.from_config(cfg(), **kw)
        model.train()
        ids = torch.randint(0, 64, (1, 32))   # 32 tokens x 2: every one of the 8 experts is hit
        with Syncs() as fwd:
            loss = model(input_ids=ids, labels=ids).loss
        with Syncs() as bwd:
            loss.backward()
        counts[impl or model.config._experts_implementation] = fwd.n, bwd.n
    assert set(counts) == {"grouped_mm", "eager"}              # grouped_mm is the default
    assert counts["grouped_mm"] == (Counter(), Counter())
    fwd, bwd = counts["eager"]
    assert fwd["nonzero"] == layers * (1 + experts) and fwd["_local_scalar_dense"] >= layers * experts
    assert bwd == Counter()


def test_pytorch_stack_prices_no_moe_sync():
    """dse's pytorch stack prices Transformers' grouped_mm experts (one kernel each way): no dispatcher wait."""
    from dse.catalog import load_model, load_system
    from dse.estimate import kernel_table as kt, run
    from dse.specs.plan import Plan

    called = []
    orig = kt.moe_sync_time
    kt.moe_sync_time = lambda *a: called.append(a) or orig(*a)
    try:
        kt._TIMES.clear()
        run(load_model("qwen3-30b-a3b"), load_system("h100-cluster"),
            Plan(stack="pytorch", seq_len=1024, micro_batch=1, global_batch=8, dp=8, zero=1))
        assert not called
        run(load_model("qwen3-30b-a3b"), load_system("h100-cluster"),
            Plan(stack="megatron", seq_len=1024, micro_batch=1, global_batch=8, dp=8, zero=1))
        assert called
    finally:
        kt.moe_sync_time = orig
        kt._TIMES.clear()
