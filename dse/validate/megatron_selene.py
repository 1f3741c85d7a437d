"""NVIDIA's Megatron-LM runs on Selene's A100s (Korthikanti et al. 2022, arXiv 2205.05198), held out.

Table 5's end-to-end iteration times of GPT 22B, 175B (GPT-3), 530B (MT-NLG) and 1T on 8-512 A100 80GB of Selene
(``hwspecs/systems/selene.yaml``: DGX A100 nodes, NVLink3, 8x HDR InfiniBand), each with full recomputation and
with sequence parallelism + selective recomputation; and the per-GPU memory of the same plans that Figure 1 draws.
The numbers, the plans and their sources are in ``data/published/korthikanti2022_selene.yaml`` (the research note
``docs/reference/selene.md`` says how each was read and checked). Nothing is fitted on them: the megatron stack
and the A100's shipped efficiencies (fitted on vTrain's Megatron-DeepSpeed runs, ``dse validate megatron-a100``)
price every row, on the datasheet links of a DGX A100 (``nvlink3``, ``ib-hdr-8x200``).

Each plan as its source states it: tensor parallelism 8, the pipeline, batch and micro-batch of Table 3, data
parallelism 1, sequence 2,048, the interleaved schedule with 3 model chunks for 175B and 530B, Megatron's fused
kernels with the materialised attention that selective recompute re-runs, Adam without the distributed optimizer.
The ``full_recompute`` column is Megatron's tensor parallelism with full recomputation (no sequence parallelism),
``seqsel`` sequence parallelism with selective recomputation.

Figure 1 plots the paper's own equations (the data file's comment and tests/test_megatron_selene.py reproduce every
bar), so the memory cases check the estimate's accounting against the paper's, not a measurement: the estimate's
first pipeline stage also holds the embeddings with their optimizer states (+2.0 to +11.0 % on the states: the word
table's shard and the whole learned position table, replicated on every tensor-parallel rank as Megatron-Core keeps
it; 1T's +11.0 % is a documented expected miss) and the activations outside the layers and of the layer being
computed (+0.3 to +2.4 %).

Besides, Narayanan et al. 2021 (arXiv 2104.04473) Table 1 (quantity ``tflops``): the achieved teraFLOP/s per GPU of
ten weak-scaling runs, GPT 1.7B on 32 GPUs to 1T on 3,072, with full recomputation in fp16 and data parallelism 6-32,
on the plans of NVIDIA's scripts for the paper (examples/sc21/run_table_1.sh): the estimate's iteration time turned
into the paper's rate with its Eq. 3 FLOPs (recomputation counted). These runs are Megatron-LM of 2021: no
asynchronous TP all-reduce, fp16 gradients, PyTorch DDP (overlapped) up to 18.4B, Megatron's local DDP (after the
backward pass) above, and no gradient-accumulation fusion (``grad_accumulation_fusion`` false): each micro-batch
after the first adds its weight gradients to the accumulated ones in a separate pass (autograd's AccumulateGrad into
the fp16 ``.grad``, 6 bytes a parameter; :func:`dse.formulas.kernels.unfused_grad_accumulation`), which brought this
part's MAPE from 3.8 to 2.2 % and its largest error from +8.1 % (530B) to +4.9 % (76B) (docs/reference/selene.md).

Targets: the time rows are held to :mod:`.megatron`'s targets, unchanged (MAPE <= 10 %, Spearman >= 0.85, each row
within 30 %); the Table 1 rates to MAPE <= 10 %, each within 30 % (no Spearman target: 135-163 TFLOP/s with ties,
their order is mostly noise); memory MAPE <= 5 %, each case within 10 % (the figure leaves out the terms above).
"""

from __future__ import annotations

from dse.validate.megatron import ROW_TOLERANCE
from dse.validate.published import load

FILE = "korthikanti2022_selene"      # data/published/korthikanti2022_selene.yaml
SYSTEM = "selene"
#: the data file's row -> the catalog model of the same shape (models/*.yaml cite Table 3)
MODELS = {"22b": "megatron-22b", "175b": "gpt3-175b", "530b": "megatron-530b", "1t": "megatron-1t"}
#: the data file's column -> (recompute, sequence parallelism)
MODES = {"full_recompute": ("full", False), "seqsel": ("selective", True), "none": ("none", False)}
TARGETS = {"time": {"mape": 0.10, "spearman": 0.85}, "tflops": {"mape": 0.10}, "memory": {"mape": 0.05}}
MEMORY_TOLERANCE = 0.10
GiB = 2**30
#: Megatron-LM README: "All models use a vocabulary size of 51,200 and a sequence length of 2048"
VOCAB, SEQ = 51200, 2048


def config(row: str) -> dict:
    """The row's model shape and plan as the data file states them."""
    return load(FILE).values("configs")[row]


def plan_for(row: str, mode: str):
    """The :class:`~dse.specs.plan.Plan` of one row in one mode (``full_recompute``, ``seqsel`` or ``none``)."""
    from dse.specs.plan import Plan

    c = config(row)
    recompute, sp = MODES[mode]
    v = c["virtual_stages"]
    return Plan(tp=c["tp"], pp=c["pp"], dp=c["dp"], micro_batch=c["micro_batch"], global_batch=c["global_batch"],
                seq_len=c["seq_len"], recompute=recompute, sequence_parallel=sp, attention="math", stack="megatron",
                precision="bf16", zero=0, virtual_stages=v, schedule="interleaved" if v > 1 else "1f1b")


def model_for(row: str):
    """The catalog model of the row with the run's vocabulary: Megatron-LM's 51,200 (the README: "All models use a
    vocabulary size of 51,200"; GPT-3's 50,257 tokens padded to 1,024 x 50 at tp 8)."""
    import dataclasses

    from dse.catalog import load_model

    return dataclasses.replace(load_model(MODELS[row]), vocab=config(row)["vocab"])


def estimate(row: str, mode: str) -> dict:
    from dse.catalog import load_system
    from dse.estimate import run

    return run(model_for(row), load_system(SYSTEM), plan_for(row, mode))


def narayanan_model(row: str):
    """A Table 1 model: a GPT of the row's shape, GPT-2's layers with the README's vocabulary and sequence (51,200,
    2,048), as the Korthikanti rows' catalog models."""
    from dse.specs.model import ModelSpec

    c = load(FILE).values("table1_configs")[row]
    return ModelSpec(name=f"gpt-{row}", layers=c["layers"], hidden=c["hidden"], heads=c["heads"], vocab=VOCAB,
                     max_seq_len=SEQ, ffn_type="gelu", norm="layernorm", bias=True, position="learned",
                     tied_embeddings=True, dropout=0.1, source="Narayanan et al. 2021, Table 1").resolved()


def narayanan_plan(row: str):
    """A Table 1 run's plan (run_table_1.sh): full recompute, fp16 with fp16 gradients, no async TP all-reduce, no
    gradient-accumulation fusion (added to Megatron-LM in 83b1e42f30, 2022-02-13, after the scripts' de7dc40f88)."""
    from dse.specs.plan import Plan

    c = load(FILE).values("table1_configs")[row]
    v = c["virtual_stages"]
    return Plan(tp=c["tp"], pp=c["pp"], dp=c["gpus"] // (c["tp"] * c["pp"]), micro_batch=c["micro_batch"],
                global_batch=c["global_batch"], seq_len=SEQ, recompute="full", attention="math", stack="megatron",
                precision="fp16", grad_dtype="half", zero=0, overlap_grad_reduce=bool(c["torch_ddp"]),
                async_tp_allreduce=False, grad_accumulation_fusion=False, virtual_stages=v,
                schedule="interleaved" if v > 1 else "1f1b")


def eq3_flops(row: str) -> float:
    """Narayanan et al. 2021 Eq. 3, the FLOPs of one iteration with recomputation: 96 B s l h^2 (1 + s/6h + V/16lh)."""
    c = load(FILE).values("table1_configs")[row]
    big_b, s, L, h = c["global_batch"], SEQ, c["layers"], c["hidden"]
    return 96 * big_b * s * L * h * h * (1 + s / (6 * h) + VOCAB / (16 * L * h))


def narayanan_tflops(row: str) -> float:
    """The estimate's achieved teraFLOP/s per GPU of a Table 1 run: Eq. 3's FLOPs over its iteration time."""
    from dse.catalog import load_system
    from dse.estimate import run

    t = run(narayanan_model(row), load_system(SYSTEM), narayanan_plan(row))["time"]["iteration"]
    return eq3_flops(row) / (t * load(FILE).values("table1_configs")[row]["gpus"]) / 1e12


#: The states cases outside the tolerance: the figure's equation leaves out the first stage's embeddings, and 1T's
#: are the largest share (tests/test_megatron_selene.py checks the surplus is those parameters).
STATES_MISSES = {"1t": ("the figure counts 12 L h^2 only; the first stage also holds its shard of the word table "
                        "(51,200 x 25,600 / 8) and the whole learned position table (2,048 x 25,600: Megatron-Core's "
                        "LanguageModelEmbedding keeps it on every tensor-parallel rank), 0.9 + 2.7 GiB at 18 B a "
                        "parameter: +11.0 %, of the estimate's accounting, not of a measurement")}


def _states(row: str) -> float:
    g = estimate(row, "seqsel")["memory"]["gpu"]
    return (g["weights"] + g["gradients"] + g["optimizer"]) / GiB


def cases():
    from dse.validate import Case

    pub = load(FILE)
    times, fig1 = pub.values("table5_iteration_time"), pub.values("figure1_memory")
    out = []
    for row, by_mode in times.items():
        c = config(row)
        layout = f"tp{c['tp']} pp{c['pp']}" + (f" vp{c['virtual_stages']}" if c["virtual_stages"] > 1 else "")
        for mode, ref in by_mode.items():
            out.append(Case(name=f"{row.upper()} {mode} ({c['gpus']} GPUs, {layout}, GBS {c['global_batch']})",
                            reference=ref, compute=lambda r=row, m=mode: estimate(r, m)["time"]["iteration"],
                            tolerance=ROW_TOLERANCE, source=pub.source("table5_iteration_time"), unit="s",
                            quantity="time"))
    for row, pub_row in pub.values("table1_throughput").items():
        c = pub.values("table1_configs")[row]
        layout = f"tp{c['tp']} pp{c['pp']}" + (f" vp{c['virtual_stages']}" if c["virtual_stages"] > 1 else "")
        dp = c["gpus"] // (c["tp"] * c["pp"])
        out.append(Case(name=f"Narayanan {row.upper()} ({c['gpus']} GPUs, {layout}, dp{dp}, mb{c['micro_batch']}) "
                             "TFLOP/s per GPU", reference=pub_row["tflops_per_gpu"],
                        compute=lambda r=row: narayanan_tflops(r), tolerance=ROW_TOLERANCE,
                        source=pub.source("table1_throughput"), quantity="tflops"))
    for row, bars in fig1.items():
        src = pub.source("figure1_memory")
        out.append(Case(name=f"{row.upper()} weights + gradients + optimizer per GPU (GiB)", reference=bars["states"],
                        compute=lambda r=row: _states(r), tolerance=MEMORY_TOLERANCE, source=src,
                        quantity="memory", note="the first stage's: the figure leaves out the embeddings",
                        expected_miss=STATES_MISSES.get(row, "")))
        for mode in ("none", "seqsel"):
            out.append(Case(name=f"{row.upper()} activations per GPU, {mode} (GiB)",
                            reference=bars[f"activations_{mode}"],
                            compute=lambda r=row, m=mode: estimate(r, m)["memory"]["gpu"]["activations"] / GiB,
                            tolerance=MEMORY_TOLERANCE, source=src, quantity="memory"))
    return out
