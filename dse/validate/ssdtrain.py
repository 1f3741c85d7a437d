"""SSDTrain (activation offloading to SSDs): published claims and the research note's worked numbers.

The numbers and their sources: ``data/published/ssdtrain.yaml``.

Set-up (K-Wu/FlashTrain drivers, research note docs/reference/activation_offload.md §1.5, §2.1):
2x A100 PCIe, TP = 2, PP = DP = 1, one micro-batch of 16 sequences of 1,024 tokens, fp16,
FlashAttention-2, no sequence parallelism, GPT / BERT / T5 / Llama at hidden 8192 x 4 layers,
12288 x 3 and 16384 x 2 (heads = hidden / 128), GPUDirect Storage to per-GPU RAID0 arrays of
4 and 3 Optane P5800X drives: ``hwspecs/systems/ssdtrain-a100-optane.yaml``. T5 (encoder-
decoder) is not modelled by dse; GPT, BERT and Llama are.

"Activation peak" here: the GPU's peak activation memory in one iteration, as SSDTrain logs it,
= dse's ``memory.gpu.activations`` (bytes held for backward: saved tensors, embedding and head,
and with offload the write backlog or the one reloaded layer) + the backward working set
(:func:`dse.formulas.activation_offload.backward_working_bytes`, gradient buffers of one layer).
The fork's training.py logs max_memory_allocated() during an iteration minus the memory of
weights, weight copies and optimizer states (K-Wu/Megatron-DeepSpeed megatron/training.py,
``train_step``), so gradient buffers are inside its peak; offloading does not shrink them, so
they dilute the reduction. Without them dse's reductions are 6-7 points higher (``held`` below).

"47 %" maps to the largest reduction over the modelled configurations (the arXiv abstracts and
the authors' blurb say "up to 47 %"); the DAC version's 45 % (Llama, BERT, T5) likewise. The
tolerance, 15 % relative, covers what the sources leave open: which configuration the figure
comes from, the RAID bandwidth the paper measured (the adaptive rule's choice of layers depends
on it; dse uses the drives' rated bandwidths), and the working-set estimate (6-10 s b h bytes).

The drivers use plain SGD with fp16 weights and gradients; dse's plan has Adam, whose heavier
optimizer step (about 3 % of these iterations) is the same with and without offload.
"""

from __future__ import annotations

from functools import cache

from dse.validate.published import load as load_published

TARGETS: dict = {}

SYSTEM = "ssdtrain-a100-optane"
SHAPES = ((8192, 4), (12288, 3), (16384, 2))

# The published claims and the note's worked numbers, each with its source: data/published/ssdtrain.yaml.
PUB = load_published("ssdtrain")


def published(table: str, key: str) -> tuple[float, str]:
    """(reference value, source) of one entry of data/published/ssdtrain.yaml."""
    return PUB.values(table)[key], PUB.source(table, key)


def ssdtrain_model(family: str, hidden: int, layers: int):
    """The drivers' model at one shape: ``gpt`` | ``bert`` | ``llama`` (heads = hidden / 128).

    GPT-2 BPE (50,257) and BERT WordPiece (30,522) vocabularies padded by Megatron to a multiple of
    128 x TP = 256: 50,432 and 30,720. Megatron GPT/BERT: LayerNorm, GeLU, learned positions, dropout
    0.1; BERT bidirectional with the masked-LM head and no binary head (``--bert-no-binary-head``).
    Llama: RMSNorm, rotary, SwiGLU, no biases, no dropout, 8 KV heads (FlashTrain
    pretrain_llama2_distributed.sh settings), FFN size Megatron's SwiGLU default int(8h/3 / 64) x 64,
    32,000-token vocabulary, untied head.
    """
    from dse.specs.model import ModelSpec

    heads = hidden // 128
    name = f"ssdtrain-{family}-{hidden}x{layers}"
    if family == "gpt":
        return ModelSpec(name=name, layers=layers, hidden=hidden, heads=heads, vocab=50432, max_seq_len=1024,
                         dropout=0.1).resolved()
    if family == "bert":
        return ModelSpec(name=name, layers=layers, hidden=hidden, heads=heads, vocab=30720, max_seq_len=1024,
                         dropout=0.1, architecture="encoder", mlm_head=True).resolved()
    if family == "llama":
        return ModelSpec(name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=8,
                         ffn_hidden=int(4 * hidden * 2 / 3 / 64) * 64, ffn_type="swiglu", norm="rmsnorm", bias=False,
                         position="rotary", tied_embeddings=False, vocab=32000, max_seq_len=1024).resolved()
    raise ValueError(family)


@cache
def scenario(family: str, hidden: int, layers: int, offload: str = "none", recompute: str = "none",
             micro_batch: int = 16, offload_layers: int | None = None) -> dict:
    """dse's estimate of one SSDTrain run (cached)."""
    from dse.estimate import resolve, run

    m, s, p = resolve(ssdtrain_model(family, hidden, layers), SYSTEM, tp=2, pp=1, dp=1, micro_batch=micro_batch,
                      seq_len=1024, precision="fp16", attention="flash", recompute=recompute,
                      offload_activations=offload, offload_layers=offload_layers)
    return run(m, s, p)


def as_run(family: str, hidden: int, layers: int) -> dict:
    """The offload run as the papers ran it: the layers SSDTrain's own (write-only) rule picks.

    dse's ``auto`` also keeps the layers whose reads cannot hide in backward; the published numbers
    come from SSDTrain's rule, so the claims are checked against it (``layers_by_ssdtrain_rule``).
    """
    k = int(scenario(family, hidden, layers, "ssd")["activation_offload"]["layers_by_ssdtrain_rule"])
    return scenario(family, hidden, layers, "ssd", offload_layers=k)


def working_set(family: str, hidden: int, layers: int) -> float:
    from dse.formulas.activation_offload import backward_working_bytes

    model = ssdtrain_model(family, hidden, layers)
    return backward_working_bytes(1024, 16, hidden, model.ffn_hidden, tp=2, ffn_type=model.ffn_type)


def peak_reduction(family: str, hidden: int, layers: int, held_only: bool = False) -> float:
    """1 - activation peak with offload (adaptive rule) / activation peak keeping everything on the GPU."""
    keep = scenario(family, hidden, layers)["memory"]["gpu"]["activations"]
    off = as_run(family, hidden, layers)["memory"]["gpu"]["activations"]
    w = 0.0 if held_only else working_set(family, hidden, layers)
    return 1 - (off + w) / (keep + w)


def time_ratio(family: str, hidden: int, layers: int, offload: str = "none", recompute: str = "none") -> float:
    """Iteration time of a variant over keep-in-GPU (no offload, no recompute); offload as the papers ran it."""
    base = scenario(family, hidden, layers)["time"]["iteration"]
    run = as_run(family, hidden, layers) if offload == "ssd" else scenario(family, hidden, layers, offload, recompute)
    return run["time"]["iteration"] / base


def bandwidth_suffices(family: str, hidden: int, layers: int) -> bool:
    """The GPU's drives meet the per-layer read requirement and SSDTrain's rule offloads every layer it wants."""
    ao = scenario(family, hidden, layers, "ssd")["activation_offload"]
    return bool(ao["read_bandwidth_available"] >= ao["read_bandwidth_required_per_layer"])


def configs(families=("gpt", "bert")):
    return [(f, h, L) for f in families for h, L in SHAPES]


def v12_layer():
    """Note V12: GPT h = 12288, s = 1024, b = 16, t = 2, no SP, flash attention, dropout."""
    from dse.formulas import activation_offload as ao, transformer as T

    shape = dict(s=1024, b=16, h=12288, heads=96, kv_heads=96, head_dim=128, ffn=4 * 12288)
    opts = dict(tp=2, sequence_parallel=False, attention="flash", dropout=True, bytes_per_element=2)
    return T.activation_bytes_per_layer(**shape, **opts), ao.offloaded_bytes_per_layer(**shape, **opts)


def cases():
    from dse.formulas import activation_offload as ao
    from dse.validate import Case

    p5800x_tbw = ao.rated_endurance(1.6e12, 100, 5)
    saved, offloaded = v12_layer()
    alpha22 = 22 * 1024 * 16 * 12288
    t100 = ao.layer_forward_time(1024, 16, 12288, 2, 100e12)
    t150 = ao.layer_forward_time(1024, 16, 12288, 2, 150e12)

    def largest(families):
        return max(peak_reduction(*c) for c in configs(families))

    def held(families):
        return ", ".join(f"{f} {h}x{L} {100 * peak_reduction(f, h, L, True):.1f}%" for f, h, L in configs(families))

    suff = [c for c in configs(("gpt", "bert", "llama")) if bandwidth_suffices(*c)]
    short = [c for c in configs(("gpt", "bert", "llama")) if c not in suff]
    # (reference value, source) of each published number, table by table (data/published/ssdtrain.yaml)
    (tbw, tbw_src), (y3, y3_src), (y1, y1_src), (y5, y5_src) = (published("endurance", k) for k in (
        "p5800x_rated_bytes", "years_at_3GBps", "years_at_1GBps", "years_at_5GBps"))
    (layer, layer_src), (layers3, layers3_src), (bw100, bw100_src), (bw150, bw150_src) = (
        published("v12_layer", k) for k in ("bytes_per_layer", "bytes_all_layers", "write_bandwidth_100tflops",
                                            "write_bandwidth_150tflops"))
    (arxiv, arxiv_src), (dac, dac_src), (loss, loss_src), (full, full_src) = (published("claims", k) for k in (
        "peak_reduction_arxiv", "peak_reduction_dac", "throughput_loss", "full_recompute_overhead"))
    return [
        # --- endurance (note §1.6, V16)
        Case("P5800X 1.6 TB rated endurance: 1.6 TB x 100 DWPD x 365 x 5 y", tbw, lambda: p5800x_tbw, 1e-3, tbw_src,
             "bytes"),
        Case("P5800X lifetime at 3 GB/s average write", y3, lambda: ao.lifetime_years(p5800x_tbw, 3e9), 0.02, y3_src,
             note="years; 365.25-day years"),
        Case("P5800X lifetime at 1 GB/s average write", y1, lambda: ao.lifetime_years(p5800x_tbw, 1e9), 0.02, y1_src,
             note="years"),
        Case("P5800X lifetime at 5 GB/s average write", y5, lambda: ao.lifetime_years(p5800x_tbw, 5e9), 0.02, y5_src,
             note="years"),
        # --- per-layer bytes and strict bandwidth (note §1.4, V12)
        Case("V12 bytes per layer per GPU (h 12288, b 16, s 1024, t 2, flash)", layer, lambda: saved, 0.005,
             layer_src, "bytes",
             note=f"autograd-exact terms {saved:.5g} B vs alpha=22 {alpha22:.5g} B: "
                  f"{100 * (saved / alpha22 - 1):+.3f} % (fp32 log-sum-exp and norm statistics)"),
        Case("V12 all 3 layers", layers3, lambda: 3 * saved, 0.005, layers3_src, "bytes"),
        Case("V12 strict write bandwidth at 100 TFLOP/s", bw100,
             lambda: ao.write_bandwidth_required(offloaded, t100), 0.005, bw100_src, "bytes/s",
             note=f"offloaded bytes {offloaded:.5g} (tensors >= 8 Mi elements); alpha=22 gives "
                  f"{alpha22 / t100 / 1e9:.2f} GB/s"),
        Case("V12 strict write bandwidth at 150 TFLOP/s", bw150,
             lambda: ao.write_bandwidth_required(offloaded, t150), 0.005, bw150_src, "bytes/s"),
        # --- the published claims
        Case("activation peak reduction, largest over GPT/BERT shapes (arXiv: up to 47 %)", arxiv,
             lambda: largest(("gpt", "bert")), 0.15, arxiv_src, "fraction",
             note="peak = held activations + backward working set; held only: " + held(("gpt", "bert"))),
        Case("activation peak reduction, largest over Llama/BERT shapes (DAC: 45 %)", dac,
             lambda: largest(("llama", "bert")), 0.15, dac_src, "fraction",
             note="held only: " + held(("llama",))),
        Case("throughput loss of offload where the drives keep up (arXiv: negligible)", loss,
             lambda: max(time_ratio(*c, offload="ssd") - 1 for c in suff), 0.02, loss_src, kind="absolute",
             note="configs whose read bandwidth meets the per-layer need: "
                  + ", ".join(f"{f} {h}x{L}" for f, h, L in suff)),
        Case("throughput loss of offload where the model's read path is short (arXiv: negligible)", loss,
             lambda: max(time_ratio(*c, offload="ssd") - 1 for c in short), 0.02, loss_src, kind="absolute",
             note="configs: " + ", ".join(f"{f} {h}x{L} {100 * (time_ratio(f, h, L, offload='ssd') - 1):.1f}%"
                                          for f, h, L in short),
             expected_miss="at hidden 8192 a layer's backward needs 24 GB/s of reads and dse's path gives 21.6 "
                           "(the GPU's PCIe link and its 4- or 3-drive RAID0 at rated bandwidth), so SSDTrain's "
                           "rule exposes ~5 % of reads (the case's value); the paper measured no loss, so its arrays "
                           "read faster than dse assumes or its backward is slower. dse's `auto` keeps those layers "
                           "instead."),
        Case("full recompute time overhead, mean over GPT/BERT shapes (30-40 %)", full,
             lambda: sum(time_ratio(*c, recompute="full") - 1 for c in configs()) / len(configs()), 0.05,
             full_src, kind="absolute"),
    ]
