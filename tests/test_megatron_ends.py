"""The work outside Megatron's transformer layers (issue 14): the vocab-parallel cross-entropy's passes over the
logits and its launches, the LM head's input-gradient collective, the embedding table's dense gradient and the
vocab-parallel lookup's masking, the padded vocabulary of the vTrain runs, and the host time of the ends' plain
torch ops (stacks/megatron.yaml ends_dispatch)."""

from __future__ import annotations

import pytest

from dse.formulas import kernels as K


def test_loss_passes_are_megatrons_cross_entropy():
    """fp16 logits upcast to fp32: 6 (cast) + 4 (max) + 8 (subtract) + 8 (exp) + 4 (sum) + 8 (divide) = 38 bytes a
    logit forward, 8 (multiply) + 6 (cast back) = 14 backward; fp16_lm_cross_entropy (no upcast): 8 x 2 and 2 x 2."""
    T, v = 2048, 25216
    row = K.vocab_parallel_loss(T, v)["loss"]
    assert row["bytes"] == 38 * T * v and row["bytes_backward"] == 14 * T * v
    assert (row["kernels"], row["kernels_backward"]) == (24, 11) and K.LOSS_KERNELS == (6, 3)
    assert row["saved"] == 4 * T * v                       # the fp32 softmax the backward reads
    half = K.vocab_parallel_loss(T, v, logits_bytes=2)["loss"]
    assert half["bytes"] == 16 * T * v and half["bytes_backward"] == 4 * T * v


def test_head_has_the_loss_all_reduces_and_the_lm_head_input_gradient():
    head = K.head_kernels(1024, 2, 2048, 50432, tp=2)
    stats = [r for n, r in head.items() if n.startswith("loss_")]
    assert len(stats) == 3 and all(r["kind"] == "collective" and r["comm"] == 4 * 2048 and r["pass"] == "forward"
                                   for r in stats)
    dgrad = head["lm_head_dgrad_allreduce"]
    assert (dgrad["op"], dgrad["pass"], dgrad["hidden_by"], dgrad["comm"]) == ("allreduce", "backward", "lm_head",
                                                                              2 * 2048 * 2048)
    sp = K.head_kernels(1024, 2, 2048, 50432, tp=2, sequence_parallel=True)
    assert sp["lm_head_gather"]["op"] == "allgather" and sp["lm_head_dgrad_scatter"]["op"] == "reduce_scatter"
    assert "lm_head_dgrad_allreduce" not in sp
    # one rank: no collective launches (and no time: dse.estimate.kernel_cost.table_time)
    assert K.table_launches({n: r for n, r in head.items() if r["kind"] == "collective"}, ranks=1) == (0, 0)


def test_embedding_gradient_and_mask():
    V, h = 50304, 2048
    emb = K.embedding_kernels(1024, 4, h, vocab=V, grad_bytes=4)
    grad = emb["embedding_grad"]
    assert grad["bytes"] == 0 and grad["bytes_backward"] == (2 * 2 + 2 * 4) * V * h   # fill, add into fp32
    one = emb["embedding_mask"]                                                       # one shard: no mask
    assert one["bytes"] == one["bytes_backward"] == one["kernels"] == one["kernels_backward"] == 0
    assert "embedding_grad" not in K.embedding_kernels(1024, 4, h)                   # no vocabulary: no row
    t8 = K.embedding_kernels(1024, 4, h, tp=8, vocab=51200)
    assert t8["embedding_grad"]["bytes_backward"] == 8 * 6400 * h
    mask = t8["embedding_mask"]
    assert mask["bytes"] == pytest.approx(2 * 4096 * h * 7 / 8)
    assert (mask["kernels"], mask["kernels_backward"]) == (8, 2)


def test_embedding_launches_follow_the_model():
    assert K.megatron_launches()["embedding"] == (5, 5)
    assert K.megatron_launches(learned_positions=False)["embedding"] == (3, 2)
    assert K.megatron_launches(False, learned_positions=False, dropout=False)["embedding"] == (2, 1)
    assert K.megatron_launches()["final_norm"] == K.MEGATRON_LAUNCHES["norm1"]


def test_a_stack_with_its_own_loss_and_embedding_drops_megatrons_rows():
    from dse.catalog import load_model, load_system
    from dse.estimate.kernel_table import kernel_tables
    from dse.formulas.precision import recipe_of
    from dse.specs.plan import Plan

    model = load_model("gpt2-xl")
    for stack, kept in (("megatron", True), ("pytorch", False)):
        plan = Plan(tp=2, micro_batch=1, seq_len=1024, stack=stack).resolved(model, load_system("dgx-h100"))
        t = kernel_tables(model, plan, recipe_of(plan))
        assert ("loss_max_allreduce" in t["head"]) is kept
        assert ("embedding_grad" in t["embedding"]) is kept and ("embedding_mask" in t["embedding"]) is kept
        assert "lm_head_dgrad_allreduce" in t["head"]        # every tensor-parallel LM head reduces its input grad


def test_frozen_tables_have_no_embedding_gradient():
    from dse.catalog import load_model, load_system
    from dse.estimate.kernel_table import kernel_tables
    from dse.formulas.precision import recipe_of
    from dse.specs.plan import Plan

    model = load_model("gpt2-xl")
    plan = Plan(micro_batch=1, seq_len=1024, finetune="lora", lora_rank=8).resolved(model, load_system("dgx-h100"))
    assert "embedding_grad" not in kernel_tables(model, plan, recipe_of(plan))["embedding"]


def test_vtrain_runs_pad_the_vocabulary_per_tensor_parallel_degree():
    from dse.validate import megatron

    assert [megatron.vocab(t) for t in (1, 2, 4, 8, 16)] == [50304, 50432, 50688, 51200, 51200]
    row = megatron.read_rows("megatron_a100_single_node_times.csv")[0]
    assert megatron.model_for(row).vocab == megatron.vocab(row["tp"])


def test_ends_dispatch_prices_the_ends_plain_ops():
    """The ends' launches are priced at the aten-op host time (stacks/megatron.yaml ends_dispatch), the layers' at
    the checkpointed layer step's (dispatch)."""
    from dse.errors import InputError
    from dse.estimate.table_inputs import stack_spec
    from dse.specs.stack import parse

    spec = stack_spec("megatron")
    assert spec.ends_dispatch == pytest.approx(4.37e-6) and spec.dispatch == pytest.approx(13.5e-6)
    assert parse({"name": "x"}, "x").ends_dispatch == 0.0
    with pytest.raises(InputError, match="ends_dispatch"):
        parse({"name": "x", "ends_dispatch": "fast"}, "stacks/x.yaml")


def test_host_bound_head_takes_its_launches_at_the_ends_rate():
    """A one-sequence head at TP 8 on the vTrain host: its forward takes max(GPU, 27 launches x 4.37 us x 4.09)."""
    from dse.catalog import load_system
    from dse.estimate.kernel_table import kernel_tables, kernel_times
    from dse.estimate.links import links
    from dse.formulas.precision import peak_flops, recipe_of
    from dse.validate import megatron

    row = {"hidden": 1024, "heads": 16, "layers": 12, "seq_len": 1024, "tp": 8, "pp": 1, "dp": 1,
           "micro_batch": 1, "global_batch": 2, "params_b": 0.0}
    system = load_system(megatron.SYSTEM)
    model = megatron.model_for(row)
    plan = megatron.plan_for(row, model).resolved(model, system)
    r = recipe_of(plan)
    tables = kernel_tables(model, plan, r)
    kt = kernel_times(tables, system, plan, peak_flops(system.node.gpu.peak_flops, r.gemm_dtype),
                      links(system, plan, model=model))
    launches = K.table_launches(tables["head"], K.megatron_launches(**tables["bias"]), ranks=8)
    assert launches == (1 + 1 + 24 + 3, 3 + 2 + 11 + 1)     # final norm, LM head, loss, its all-reduces; + dgrad
    per = 4.37e-6 * system.node.host.dispatch_scale
    assert kt["t_head"] >= per * sum(launches) - 1e-12


def test_fused_cross_entropies_move_fewer_bytes():
    """Megatron-Core's jit-fused loss: (e + 5 e_l) and (e_l + e) bytes a logit; Transformer Engine's Triton kernels in
    the logits' dtype: 3 e and 2 e, saving the gradient (e) instead of the fp32 softmax."""
    T, v = 8192, 32064
    native = K.vocab_parallel_loss(T, v, tp=4, fusion="native")
    assert native["loss"]["bytes"] == 22 * T * v and native["loss"]["bytes_backward"] == 6 * T * v
    assert [r["comm"] for n, r in native.items() if n != "loss"] == [4 * T, 8 * T]    # max; predicted + sum
    te = K.vocab_parallel_loss(T, v, tp=4, fusion="te")
    assert (te["loss"]["bytes"], te["loss"]["bytes_backward"], te["loss"]["saved"]) == (6 * T * v, 4 * T * v, 2 * T * v)
    assert (te["loss"]["kernels"], te["loss"]["kernels_backward"]) == (2 + 6, 1 + 3)
    assert te["loss_stats_allgather"]["comm"] == 12 * T * 4
    with pytest.raises(ValueError, match="fusion"):
        K.vocab_parallel_loss(T, v, fusion="liger")


def test_plan_and_megatron_arguments_carry_the_fused_cross_entropy():
    from dse.catalog import load_model, load_system
    from dse.errors import InputError
    from dse.frameworks import megatron as fw
    from dse.specs.plan import Plan

    model, system = load_model("llama3-8b"), load_system("dgx-h100")
    plan = Plan(tp=2, micro_batch=1, seq_len=8192, cross_entropy_fusion="te").resolved(model, system)
    text, _ = fw.emit(model, system, plan)
    assert "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te" in text
    assert fw.read(text).plan["cross_entropy_fusion"] == "te"
    assert "cross_entropy_fusion" not in fw.read(text.replace(" --cross-entropy-loss-fusion", "")).plan
    assert fw.read(text.replace("--cross-entropy-fusion-impl te", "")).plan["cross_entropy_fusion"] == "native"
    from dse.specs._schema import build

    with pytest.raises(InputError, match="cross_entropy_fusion"):
        build(Plan, {"cross_entropy_fusion": "liger"}, "plan")


def test_the_bridge_recipes_run_transformer_engines_cross_entropy():
    from dse.validate import megatron_bridge

    assert megatron_bridge._RECIPE["cross_entropy_fusion"] == "te"
    assert all(fields["cross_entropy_fusion"] == "te" for _, _, fields in megatron_bridge.MOE_ROWS.values())
