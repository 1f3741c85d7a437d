"""Llama 3 405B pre-training on Meta's H100 RoCE cluster: the TFLOPs per GPU of Table 4's three stages.

Llama Team 2024 (arXiv 2407.21783) Table 4 (``data/published/llama3.yaml``, which records what was verified and
from where): 8,192 GPUs at 8K tokens, 430 TFLOPs/GPU; 16,384 GPUs at 8K, 400; 16,384 GPUs at 131,072 tokens with
context parallelism 16, 380. The one published check of dse's context parallelism at scale (issue 15). Each row is
estimated on ``meta-h100-roce`` with the catalog's ``llama3.1-405b`` and the plan the paper states, as far as dse
expresses it, every efficiency the H100's measured one; nothing fitted:

- TP 8 (with sequence parallelism: Megatron-style TP, the paper's Figure 5 order [TP, CP, PP, DP]), PP 16, CP and
  DP as the row states, bf16 mixed precision, flash attention, the sequences per DP rank as micro-batches of one
  sequence (the paper's "tunable number of micro-batches"; a micro-batch size is not stated);
- the interleaved schedule with the paper's stage balancing (§3.3.2, recalled, not verified from a text read here:
  one Transformer layer fewer on the first and the last stage, whose first and last model chunks hold only the
  embedding and only the output projection and loss): :data:`LAYOUT` ``E|(t|)*126L``, 128 chunks of one layer
  (or one end) = 16 stages x 8 virtual stages;
- FSDP that shards the optimizer states and gradients and does not reshard the parameters after the forward
  (recalled, not verified): ZeRO-2 over DP x CP, its one parameter gather and one gradient reduce-scatter per
  step overlapped with compute (``overlap_grad_reduce``; as FSDP prefetches);
- context parallelism by all-gather (§3.3.2, verified via PyTorch's context-parallel tutorial: K and V all-gathered,
  then attention for the local query chunk; 2 x CP load-balanced chunks): ``cp_comm allgather``, exposed as TE's;
- no activation recomputation: the paper pre-trains at 8K tokens "without activation checkpointing" (recalled,
  not verified); dse holds the 8K rows at 83.7 GiB per GPU against 79.6 GiB (its accounting does not see the
  paper's freeing of each stage's input and output tensors), the 128K row at 76.6 GiB: time compared as if it fitted.

The FLOP convention (the crux at 131,072 tokens). TFLOPs/GPU is counted FLOPs / (iteration x GPUs); so the
comparison is made in the paper's counting, computed here (:func:`flops_per_token`) from the estimated iteration
time, not from dse's own MFU. The paper gives MFU as PaLM's (Chowdhery et al., recalled; glennklockwood.com's MFU
note says Meta defines it "very similarly"): 6N + 12 L H Q T per token, the attention without the causal mask's
saving, as Meta's torchtitan counts it. Whether the 380 counts attention that way could not be verified, so both
ends of the band are compared, each a case (``quantity``):

- ``palm``: 6N + 12 L a d s (N the parameters without the input embedding);
- ``causal``: 6N + 6 L a d s, the attention FLOPs a causal flash kernel executes (Megatron-Bridge's convention:
  its 292 tokens/s/GPU for this model are 737 model TFLOP/s, 2.52e12 per token = this count at 8K).

At 8K the two differ by 4 % (the attention is 8.4 % or 4.2 % of 6N); at 131,072 tokens by 40 % (134 % or 67 %):
the paper's 380 implies an iteration of 15.3 s in ``palm`` counting and 10.9 s in ``causal``. Counting no attention
at all (6N) would imply 6.5 s, i.e. 64 % of peak executed at 128K against 43 % at 8K with the same kernels: not
compared.

Tolerance 20 %, set before the model's answer was seen: the megatron-bridge suite's 15 % for NVIDIA's recipes,
whose plans are stated in full and whose kernels dse was calibrated against, widened for what this paper leaves
open (Meta's own training stack, the micro-batch size, the virtual stages, the recompute and FSDP choices recalled
above, a production job's stalls at 8K-16K GPUs).

Results (this commit; docs/long-context.md "Checked against"): iterations 9.45, 5.06 and 12.53 s against the
12.02-12.50, 6.46-6.72 and 10.90-15.28 s the paper implies (causal .. palm); TFLOPs/GPU 569 / 531 / 463 (palm:
+32.3, +32.8, +21.9 %) and 547 / 511 / 331 (causal: +27.2, +27.7, -13.0 %). The 128K row lies inside the band; the
8K rows are documented misses (:data:`MISS_8K`); the ordering 430 > 400 > 380 holds in both countings.
Sensitivity to the recalled, unverified plan items (not the case): full recompute 12.73 and 16.47 s (8,192-GPU and
128K rows); FSDP resharding every micro-batch (ZeRO-3) 20.2 and 13.8 s; the gradient reduction not overlapped 9.71
and 12.92 s.
"""

from __future__ import annotations

SYSTEM = "meta-h100-roce"
MODEL = "llama3.1-405b"
TOLERANCE = 0.20
FILE = "llama3"
ROWS = ("gpus8k_seq8k", "gpus16k_seq8k", "gpus16k_seq128k")
NAMES = {"gpus8k_seq8k": "Llama-3 405B, 8,192 H100s, TP8 PP16 DP64, seq 8K",
         "gpus16k_seq8k": "Llama-3 405B, 16,384 H100s, TP8 PP16 DP128, seq 8K",
         "gpus16k_seq128k": "Llama-3 405B, 16,384 H100s, TP8 CP16 PP16 DP8, seq 128K (cp allgather)"}
#: Megatron-LM's --pipeline-model-parallel-layout of the paper's balanced interleaved pipeline: the embedding alone,
#: 126 one-layer chunks, the loss alone: 128 chunks over 16 stages (8 virtual stages)
LAYOUT = "E|(t|)*126L"
VIRTUAL_STAGES = 8
#: attention FLOPs per token and layer as a multiple of a d s (query heads x head dim x sequence length)
CONVENTIONS = {"palm": 12, "causal": 6}
CONVENTION_NAMES = {"palm": "PaLM MFU counting: attention without the causal saving",
                    "causal": "executed (causal) attention FLOPs"}
MISS_8K = ("dse is fast at 8K tokens (iteration 9.45 s for the 8,192-GPU row against the 12.0-12.5 s the 430 "
           "implies): compute 7.38 s, TP communication 1.36 s, bubble 0.51 s, DP 0.15 s, i.e. 55 % MFU against "
           "Meta's 43 %. Not isolated: what a 16K-GPU production job loses that dse does not price (the Clos "
           "fabric's oversubscription, stragglers and collective stalls, sustained clocks at 700 W) is not given "
           "by the paper; full recompute instead of none would give 12.73 s (the paper states none). The 8K -> 16K "
           "drop is reproduced: -6.6 % against the paper's -7.0 % (the same bubble behind half the micro-batches)")
MISS_128K_PALM = ("in PaLM's counting the 128K row is +22 %, as fast as the 8K rows' bias (+32 %); in the causal "
                  "counting it is -13 %: the 131,072-token row's attention runs at the H100's measured flash "
                  "attention efficiency (0.30 of peak, head dim 64); the band's two ends bracket the paper")
EXPECTED = {("gpus8k_seq8k", "palm"): MISS_8K, ("gpus16k_seq8k", "palm"): MISS_8K,
            ("gpus8k_seq8k", "causal"): MISS_8K, ("gpus16k_seq8k", "causal"): MISS_8K,
            ("gpus16k_seq128k", "palm"): MISS_128K_PALM}


def flops_per_token(model, seq_len: int, convention: str) -> float:
    """Training FLOPs per token as the convention counts them.

    Formula: 6 N + c L a d s, N = parameters without the input embedding (a lookup, not a matmul), c = 12 (PaLM,
    Chowdhery et al. 2022 App. B; torchtitan get_dense_model_nparams_and_flops) or 6 (causal: half the score
    matrix, what a causal flash kernel executes)
    """
    from dse.estimate.parameters import model_parameters

    total, _ = model_parameters(model)
    n = total - model.vocab * model.hidden
    return 6 * n + CONVENTIONS[convention] * model.layers * model.heads * model.head_dim * seq_len


def layout(row: str) -> dict:
    """The row's plan columns (gpus, tp, cp, pp, dp, seq_len, batch_per_dp) from the published file."""
    from dse.validate.published import load

    pub = load(FILE)
    return dict(zip(pub.tables["plan"]["columns"], pub.values("plan")[row]))


def plan_for(row: str):
    """The :class:`~dse.specs.plan.Plan` of one Table 4 row (the module's assumptions)."""
    from dse.specs.plan import Plan

    r = layout(row)
    return Plan(tp=r["tp"], cp=r["cp"], pp=r["pp"], dp=r["dp"], seq_len=r["seq_len"], micro_batch=1,
                global_batch=r["batch_per_dp"] * r["dp"], precision="bf16", attention="flash",
                sequence_parallel=True, schedule="interleaved", virtual_stages=VIRTUAL_STAGES,
                pipeline_layout=LAYOUT, zero=2, overlap_grad_reduce=True, recompute="none",
                **({"cp_comm": "allgather"} if r["cp"] > 1 else {}))


def result(row: str) -> dict:
    """The estimate of one row (``run(model, system, plan)``; its ``time`` is the per-term breakdown)."""
    from dse.catalog import load_model, load_system
    from dse.estimate import run

    return run(load_model(MODEL), load_system(SYSTEM), plan_for(row))


def tflops_per_gpu(row: str, convention: str, iteration: float | None = None) -> float:
    """TFLOP/s per GPU in the convention: flops_per_token x tokens per iteration / (iteration x GPUs)."""
    from dse.catalog import load_model

    r = layout(row)
    t = result(row)["time"]["iteration"] if iteration is None else iteration
    tokens = r["batch_per_dp"] * r["dp"] * r["seq_len"]
    return flops_per_token(load_model(MODEL), r["seq_len"], convention) * tokens / (t * r["gpus"]) / 1e12


def implied_iteration(row: str, convention: str) -> float:
    """The iteration time the paper's TFLOPs/GPU implies in the convention [s]."""
    from dse.validate.published import load

    ref = load(FILE).values("table4")[row]
    return tflops_per_gpu(row, convention, iteration=1.0) / ref


def cases():
    from functools import cache

    from dse.validate import Case
    from dse.validate.published import load

    pub = load(FILE)
    ref = pub.values("table4")
    iteration = cache(lambda row: result(row)["time"]["iteration"])
    return [Case(name=f"{NAMES[row]} (TFLOPs/GPU, {conv})", reference=ref[row],
                 compute=lambda row=row, conv=conv: tflops_per_gpu(row, conv, iteration(row)),
                 tolerance=TOLERANCE, source=pub.source("table4", row), unit="",
                 note=CONVENTION_NAMES[conv], expected_miss=EXPECTED.get((row, conv), ""), quantity=conv)
            for conv in CONVENTIONS for row in ROWS]
