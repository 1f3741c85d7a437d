"""The kernel table (dse.formulas.kernels): its reductions equal the closed-form formulas, over random shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dse.formulas import chiplet as CH, compute as C, kernels as K, transformer as T


@st.composite
def layers(draw):
    """A random layer shape and plan: heads divisible by kv heads, both by t."""
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    kv = tp * draw(st.integers(1, 4))
    heads = kv * draw(st.sampled_from([1, 2, 4, 8]))
    head_dim = draw(st.sampled_from([32, 64, 80, 128]))
    h = draw(st.sampled_from([heads * head_dim, 256 * draw(st.integers(1, 64))]))
    ffn = tp * draw(st.integers(1, 4096))
    shape = dict(s=draw(st.integers(1, 8192)), b=draw(st.integers(1, 16)), h=h, heads=heads, kv_heads=kv,
                 head_dim=head_dim, ffn=ffn)
    opts = dict(tp=tp, sequence_parallel=draw(st.booleans()) and tp > 1,
                recompute=draw(st.sampled_from(["none", "selective", "full"])),
                attention=draw(st.sampled_from(["flash", "math"])),
                ffn_type=draw(st.sampled_from(["gelu", "relu", "swiglu"])),
                norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
                position=draw(st.sampled_from(["learned", "rotary", "none"])),
                dropout=draw(st.booleans()), bytes_per_element=draw(st.sampled_from([1, 2, 4])))
    return shape, opts


def close(a, b):
    return a == pytest.approx(b, rel=1e-12, abs=1e-9)


def table(shape, opts, causal=True):
    return K.layer_kernels(*shape.values(), causal=causal, **opts)


@settings(max_examples=300, deadline=None)
@given(layers())
def test_saved_bytes_are_the_activation_formula(case):
    shape, opts = case
    k = table(shape, opts)
    assert close(K.saved_bytes(k), T.activation_bytes_per_layer(*shape.values(), **opts))
    assert close(K.rerun_bytes(k), T.recompute_working_bytes(*shape.values(), **opts))


@settings(max_examples=300, deadline=None)
@given(layers())
def test_elementwise_bytes_are_the_closed_form(case):
    shape, opts = case
    k = table(shape, opts)
    moved = sum(row["bytes"] for row in k.values() if row["kind"] == "elementwise")
    ew = {o: opts[o] for o in ("tp", "sequence_parallel", "attention", "ffn_type", "position", "dropout",
                               "bytes_per_element")}
    s, b, h, a, kv, hd, F = shape.values()
    assert close(moved, C.elementwise_bytes(s, b, h, F, a, kv, hd, **ew))
    # selective recompute runs the attention core's element-wise kernels again: the softmax (and its dropout)
    soft = sum(row["bytes"] for row in k.values() if row["kind"] == "elementwise" and row.get("selective"))
    assert close(soft, C.elementwise_bytes(s, b, 0, 0, a, 0, hd, **{**ew, "position": "none"}))


@settings(max_examples=300, deadline=None)
@given(layers(), st.integers(1, 128), st.integers(1000, 260000), st.booleans())
def test_flops_are_the_model_flops(case, n_layers, vocab, causal):
    shape, opts = case
    s, b, h, a, kv, hd, F = shape.values()
    t = opts["tp"]
    vocab = vocab * t
    k = table(shape, opts, causal)
    head = K.head_kernels(s, b, h, vocab, tp=t)
    micro_batches = 3
    tokens = micro_batches * s * b
    per_gpu = 3 * (n_layers * K.forward_flops(k) + K.forward_flops(head))
    model = T.model_flops(tokens, n_layers, h, a, kv, hd, F, vocab, s, opts["ffn_type"], causal)
    assert close(micro_batches * t * per_gpu, model)
    rec = micro_batches * t * n_layers * K.recomputed_flops(k, opts["recompute"])
    assert close(rec, T.recompute_flops(tokens, n_layers, h, a, kv, hd, F, s, opts["ffn_type"], opts["recompute"],
                                        causal))
    if opts["attention"] == "flash":
        row = k["attention"]
        assert row["executed"] == C.flash_attention_flops(s, b, a / t, hd, causal)
        assert row["executed_backward"] == C.flash_attention_flops(s, b, a / t, hd, causal, backward=True)


@settings(max_examples=200, deadline=None)
@given(layers(), st.integers(1000, 260000), st.booleans())
def test_embedding_and_head_rows_are_their_formulas(case, vocab, final_norm):
    shape, opts = case
    s, b, h = shape["s"], shape["b"], shape["h"]
    t, sp, e = opts["tp"], opts["sequence_parallel"], opts["bytes_per_element"]
    head = K.head_kernels(s, b, h, vocab, tp=t, sequence_parallel=sp, norm=opts["norm"], final_norm=final_norm,
                          bytes_per_element=e)
    assert close(K.saved_bytes(head), T.head_activation_bytes(s, b, h, vocab, tp=t, sequence_parallel=sp,
                                                              norm=opts["norm"], final_norm=final_norm,
                                                              bytes_per_element=e))
    emb = K.embedding_kernels(s, b, h, tp=t, sequence_parallel=sp, dropout=opts["dropout"],
                              position=opts["position"], bytes_per_element=e)
    assert close(K.saved_bytes(emb), T.embedding_activation_bytes(s, b, h, tp=t, sequence_parallel=sp,
                                                                  dropout=opts["dropout"], position=opts["position"]))


@settings(max_examples=200, deadline=None)
@given(layers())
def test_weight_gemms_are_the_layer_parameters_and_the_chiplet_list(case):
    shape, opts = case
    s, b, h, a, kv, hd, F = shape.values()
    t = opts["tp"]
    k = table(shape, opts)
    gemms = K.weight_gemms(k)
    weights = sum(kk * n for _, kk, n, _ in gemms)
    no_bias = T.layer_parameters(h, a, kv, hd, F, opts["ffn_type"], opts["norm"], bias=False, qkv_bias=False)
    assert close(weights * t, no_bias - 2 * T.norm_parameters(h, opts["norm"]))
    # unsplit (t = 1), the table's weight GEMMs are the chiplet model's layer_gemms, integers and all
    one = K.weight_gemms(K.layer_kernels(s, b, h, a, kv, hd, F, ffn_type=opts["ffn_type"]))
    assert one == CH.layer_gemms(h, a, kv, hd, F, opts["ffn_type"])
    assert all(type(x) is int for g in one for x in g[1:3])


@settings(max_examples=100, deadline=None)
@given(layers())
def test_tensor_parallel_collectives(case):
    """Two all-reduces of one [s, b, h] activation forward and two backward; full recompute repeats the forward."""
    shape, opts = case
    k = table(shape, opts)
    coll = [row for row in k.values() if row["kind"] == "collective"]
    assert all(row["comm"] == opts["bytes_per_element"] * shape["s"] * shape["b"] * shape["h"] for row in coll)
    assert [row["pass"] for row in coll].count("forward") == 2
    assert {row.get("hidden_by") for row in coll if row["pass"] == "backward"} == {"qkv", "fc1"}
    n = 6 if opts["recompute"] == "full" else 4
    assert close(K.message_bytes(k, "tp", opts["recompute"]), n * coll[0]["comm"])


def test_rows_broadcast_over_plan_arrays():
    """Plan fields may be arrays (the vectorised search): each element is the scalar table's value."""
    b = np.array([1, 2, 4])
    tp = np.array([1, 2, 4])
    opts = dict(sequence_parallel=True, attention="math", ffn_type="swiglu", norm="rmsnorm", position="rotary",
                dropout=False)
    arr = K.layer_kernels(2048, b, 4096, 32, 8, 128, 11008, tp=tp, **opts)
    for i in range(3):
        one = K.layer_kernels(2048, int(b[i]), 4096, 32, 8, 128, 11008, tp=int(tp[i]), **opts)
        assert list(one) == list(arr)
        for name, row in one.items():
            for key, value in row.items():
                if isinstance(value, str) or isinstance(value, bool):
                    assert arr[name][key] == value
                else:
                    assert np.broadcast_to(arr[name][key], (3,))[i] == pytest.approx(value, rel=1e-12), (name, key)


def test_every_row_has_a_known_kind_and_the_keys_of_its_kind():
    need = {"gemm": {"m", "k", "n", "batch", "split", "flops"}, "flash": {"flops", "executed", "executed_backward"},
            "elementwise": {"bytes"}, "collective": {"op", "group", "comm", "pass"}}
    for attention in ("flash", "math"):
        for rec in ("none", "selective", "full"):
            k = K.layer_kernels(1024, 2, 2048, 16, 4, 128, 5632, tp=2, attention=attention, recompute=rec,
                                position="rotary")
            tables = [k, K.embedding_kernels(1024, 2, 2048, tp=2), K.head_kernels(1024, 2, 2048, 32000, tp=2)]
            for tab in tables:
                for name, row in tab.items():
                    assert row["kind"] in K.KINDS, name
                    assert need[row["kind"]] <= set(row) and "saved" in row, name


def test_gpu_and_chiplet_estimates_take_their_gemms_from_the_same_table(monkeypatch):
    """Both estimates build their layer from kernels.layer_kernels; the chiplet's GEMM list is the GPU's, unsplit."""
    from dse.estimate import kernel_table, resolve, run

    calls = []
    real = K.layer_kernels

    def recording(*args, **kwargs):
        table = real(*args, **kwargs)
        calls.append((kwargs.get("tp", 1), table))
        return table

    monkeypatch.setattr(K, "layer_kernels", recording)
    monkeypatch.setattr(kernel_table, "_TABLES", {})
    m, s, p = resolve("llama2-70b", "a100-cluster-800g", tp=8, pp=4, dp=2, micro_batch=1, global_batch=64)
    run(m, s, p)
    (tp, gpu), = [c for c in calls if c[0] == 8]
    mc, sc, pc = resolve("llama2-70b", "chiplet-train-8x8", global_batch=16)
    r = run(mc, sc, pc)
    unsplit = [table for tp, table in calls if tp == 1]
    assert unsplit, "the chiplet estimate did not build its layer from the kernel table"
    chiplet = K.weight_gemms(unsplit[0])
    assert chiplet == CH.layer_gemms(m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.ffn_type)
    for name, k, n, split in chiplet:                      # the GPU's GEMMs are the same ones, split over t = 8
        row = gpu[name]
        assert row["split"] == split
        assert (row["k"], row["n"]) == ((k, n / 8) if split == "column" else (k / 8, n))
    # the chiplet's FLOPs are those of the table
    tok = pc.micro_batch * pc.seq_len
    assert r["flops"]["model_per_iteration"] == pytest.approx(
        3 * pc.global_batch / pc.micro_batch * (m.layers * K.forward_flops(unsplit[0])
                                                 + 2 * tok * m.hidden * m.vocab), rel=1e-12)


def test_gpu_layer_time_is_the_sum_over_the_table():
    """The estimate's layer forward time is the per-kernel times of the table plus its TP all-reduces."""
    from dse.estimate import base, kernel_table, resolve
    from dse.formulas import parallelism as P

    m, s, p = resolve("llama2-7b", "dgx-a100-80gb", tp=2, micro_batch=2, attention="math")
    c = base.compose(m, s, p)
    table = c["terms"].kernels["layer"]
    hw = kernel_table.cost_of(s.node.gpu, c["peak_flops"])
    compute = sum(kernel_table.kernel_time(row, hw, C)[0] for row in table.values() if row["kind"] != "collective")
    hw = hw._replace(operand_bytes=2)      # bf16 operands: the roofline of the memory-bound attention GEMMs

    def roofline(r):
        moved = 2 * r["batch"] * (r["m"] * r["k"] + r["k"] * r["n"] + r["m"] * r["n"])
        return max(C.gemm_time(r["m"], r["k"], r["n"], hw.peak, hw.gemm, hw.overhead, r["batch"]),
                   C.memory_time(moved, hw.bandwidth, hw.memory) + hw.overhead)

    compute = sum(kernel_table.kernel_time(row, hw, C)[0] for row in table.values() if row["kind"] != "collective")
    gemms = sum(roofline(r) for r in table.values() if r["kind"] == "gemm")
    assert any(roofline(r) > C.gemm_time(r["m"], r["k"], r["n"], hw.peak, hw.gemm, hw.overhead, r["batch"])
               for r in table.values() if r["kind"] == "gemm")      # math attention's score GEMMs wait on HBM
    assert gemms == pytest.approx(sum(kernel_table.kernel_time(r, hw, C)[0] for r in table.values()
                                      if r["kind"] == "gemm"), rel=1e-12)
    link = base.links(s, p)["tp"]
    ar = P.allreduce_time(table["attn_allreduce"]["comm"], 2, link.bandwidth, path=link.path)
    assert c["terms"].time.gpu_forward == pytest.approx(compute + 2 * ar, rel=1e-12)


def test_a_new_kernel_is_one_row(monkeypatch):
    """Adding a kernel to the layer is one row of the table: time, activation memory and FLOPs follow.

    The worked example of "how to add a kernel": an extra element-wise kernel (bytes moved, bytes saved) and an
    extra GEMM, appended by wrapping kernels.layer_kernels; nothing else changes.
    """
    from dse.estimate import base, resolve

    m, s, p = resolve("llama2-7b", "dgx-a100-80gb", tp=2, micro_batch=2)
    before = base.compose(m, s, p)
    real = K.layer_kernels
    moved, kept = 64e6, 8e6
    tok, h = p.seq_len * p.micro_batch, m.hidden

    def with_extra(*args, **kwargs):
        table = dict(real(*args, **kwargs))
        table["extra_elementwise"] = {"kind": "elementwise", "bytes": moved, "saved": kept}
        table["extra_gemm"] = {"kind": "gemm", "m": tok, "k": h, "n": h, "batch": 1, "split": "", "saved": 0,
                               "flops": 2 * tok * h * h}
        return table

    monkeypatch.setattr(K, "layer_kernels", with_extra)
    after = base.compose(m, s, p)
    tables = after["terms"].kernels
    eff = s.node.gpu.efficiency
    ew = moved / (s.node.gpu.hbm_bandwidth * eff.memory)
    gemm = C.gemm_time(tok, h, h, after["peak_flops"], eff.gemm, eff.gemm_overhead)
    t0, t1 = before["terms"].time, after["terms"].time
    assert t1.gpu_forward - t0.gpu_forward == pytest.approx(ew + gemm, rel=1e-9)
    assert t1.gpu_backward - t0.gpu_backward == pytest.approx(2 * (ew + gemm), rel=1e-9)
    assert after["activation_bytes_per_layer"] - before["activation_bytes_per_layer"] == pytest.approx(kept)
    extra_flops = 3 * p.global_batch / p.micro_batch * p.tp * m.layers * 2 * tok * h * h
    assert (after["flops"]["model_per_iteration"] - before["flops"]["model_per_iteration"]
            == pytest.approx(extra_flops, rel=1e-9))
    assert "extra_gemm" in tables["layer"] and after["time"]["iteration"] > before["time"]["iteration"]
