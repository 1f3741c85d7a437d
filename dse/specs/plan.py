"""The plan: how the model is trained on the hardware.

Parallelism (``tp``, ``pp``, ``dp``), batch, recompute, attention kernel,
sequence parallelism, ZeRO stage and precision. Consistency checks that need
the model (tp divides heads, pp at most layers, ...) are one table of rules,
:mod:`dse.specs.rules`: :func:`check_plan` raises from it and :func:`plan_rules`
evaluates it as masks, so the same rules serve the CLI, the library and the search.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from dse.formulas._array import maximum, where
from dse.formulas.fp8 import SCALINGS as FP8_SCALINGS
from dse.formulas.parallelism.dispatch import DISPATCHERS as MOE_DISPATCHERS
from dse.formulas.precision import DEFAULT_GRAD_DTYPE, GRAD_DTYPE_BYTES, PRECISIONS
from dse.specs import rules
from dse.specs._schema import spec_field
from dse.specs.hardware import GPU_SYSTEM
from dse.specs.model import TRAINING_SEQ_LEN
from dse.specs.rules_cp import default_a2a
from dse.specs.stack import STACKS

RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("flash", "math")
PRECISION = PRECISIONS              # names of the precision recipes (dse/formulas/precision.py)
GRAD_DTYPE = tuple(GRAD_DTYPE_BYTES)
OPTIMIZERS = ("adam", "adam-8bit", "sgd-momentum", "adagrad")
# context parallelism (Megatron --cp-comm-type): the K/V ring, Ulysses' all-to-all over the heads, the two
# hierarchically (a2a inside, the ring outside), or an all-gather of the whole sequence's K/V
CP_COMM = ("p2p", "a2a", "a2a+p2p", "allgather")
OFFLOAD_OPTIMIZER = ("gpu", "cpu", "cxl", "nvme", "csd")   # where the optimizer states (and fp32 gradients) live
OFFLOAD_PARAMS = ("gpu", "cpu", "cxl", "nvme")      # where the fp16 parameters live between uses
EXCHANGE_DTYPES = ("fp32", "fp16")
SCHEDULES = ("1f1b", "interleaved", "gpipe", "dualpipe")
CHIPLET_SCHEMES = ("megatron-1d", "summa-2d", "hecaton-2d")
CROSS_ENTROPY_FUSIONS = ("native", "te")   # dse.formulas.kernels.vocab_parallel_loss
CHIPLET_SCHEDULES = ("auto", "minibatch", "microbatch")
OFFLOAD_ACTIVATIONS = ("none", "ssd", "host")   # where saved activations go between forward and backward
ACTIVATION_IO_PATHS = ("gds", "bounce")         # GPUDirect Storage, or staged through host memory
# how saved activations move: SSDTrain's tensor cache (asynchronous, deduplicated, forwarded), or PyTorch's
# saved-tensor hooks (save_on_cpu: every saved tensor copied on the compute stream)
ACTIVATION_OFFLOAD_MECHANISMS = ("forwarding", "hooks")
# fine-tuning: every weight trained, or frozen weights with LoRA adapters (QLoRA: the frozen linear weights quantized)
FINETUNES = ("full", "lora", "qlora")
LORA_TARGETS = ("all", "attention", "qv", "mlp")
QUANTIZATIONS = ("nf4", "int8")


@dataclass(frozen=True, kw_only=True)
class Plan:
    tp: int = spec_field(1, gt=0, help="tensor-parallel degree")
    pp: int = spec_field(1, gt=0, help="pipeline-parallel stages")
    cp: int = spec_field(1, gt=0, help="context-parallel degree (Megatron --context-parallel-size): the sequence is "
                         "split over cp GPUs, ring attention exchanges K/V; docs/long-context.md")
    cp_comm: str = spec_field("p2p", choices=CP_COMM, help="context-parallel communication (Megatron "
                              "--cp-comm-type): p2p (the K/V ring), a2a (DeepSpeed-Ulysses: all-to-all of Q, K, V and "
                              "the output over the heads), a2a+p2p (hierarchical: a2a over cp_a2a ranks, the ring "
                              "over the cp/cp_a2a groups) or allgather (the whole sequence's K/V gathered, TE "
                              "all_gather); docs/long-context.md")
    cp_a2a: int | None = spec_field(None, gt=0, help="cp_comm a2a+p2p: ranks of the a2a level (Megatron "
                                    "--hierarchical-context-parallel-sizes cp_a2a cp/cp_a2a); default: the cp ranks "
                                    "in one node, gcd(cp, GPUs per node / tp)")
    dp: int | None = spec_field(None, gt=0, help="data-parallel replicas; default: fill one node of the system")
    ep: int = spec_field(1, gt=0, help="expert-parallel degree of an MoE model: its experts split over ep ranks "
                         "folded over the tp x cp x dp ones (Megatron-Core --expert-model-parallel-size; ep divides "
                         "the experts, ep x etp divides tp x cp x dp); docs/moe.md")
    etp: int | None = spec_field(None, gt=0, help="expert tensor-parallel degree of an MoE model (Megatron-Core "
                                 "--expert-tensor-parallel-size, MoE Parallel Folding): each routed expert split over "
                                 "etp GPUs; ep x etp divides tp x cp x dp; default: tp; docs/moe.md")
    expert_capacity: float | None = spec_field(None, gt=0, help="capacity factor C of an MoE model's experts "
                                               "(Megatron-Core --moe-expert-capacity-factor): an expert takes at most "
                                               "C T k / E of a GPU's T routed tokens, the rest are dropped; default: "
                                               "dropless; docs/moe.md")
    pad_to_capacity: bool = spec_field(False, help="pad every expert's tokens to its capacity (Megatron-Core "
                                       "--moe-pad-expert-input-to-capacity); needs expert_capacity")
    moe_dispatcher: str | None = spec_field(None, choices=MOE_DISPATCHERS, help="token dispatcher of expert "
                                            "parallelism (Megatron-Core --moe-token-dispatcher-type): alltoall "
                                            "(NCCL's all-to-all: every routed copy sent) or flex (DeepEP: once per "
                                            "destination node over RDMA, forwarded over NVLink once per GPU; "
                                            "--moe-enable-deepep); default: alltoall in one node, flex across "
                                            "nodes; docs/moe.md")
    moe_dispatch_dtype: str = spec_field("bf16", choices=("bf16", "fp8"), help="dtype of the dispatch and of the "
                                         "combine's backward (tokens to experts): fp8 is DeepEP's FP8 dispatch "
                                         "(e4m3 + a scale per 128 values; the combine stays bf16, DeepSeek-V3 "
                                         "§3.3.3); needs moe_dispatcher flex")
    micro_batch: int = spec_field(1, gt=0, help="sequences per micro-batch b")
    global_batch: int | None = spec_field(None, gt=0,
                                          help="sequences per iteration B; default b*dp (pp=1) or b*dp*4*pp")
    seq_len: int | None = spec_field(None, gt=0, help="tokens per sequence s; default the model's seq_len "
                                   "(4096, or its max_seq_len when smaller, unless the model states one)")
    target_len: int | None = spec_field(None, gt=0, help="decoder (target) tokens per sequence of an "
                                        "encoder-decoder model (seq_len is the encoder's input length); default the "
                                        "model's target_len, else seq_len")
    recompute: str = spec_field("none", choices=RECOMPUTE, help="activation recomputation")
    attention: str | None = spec_field(None, choices=ATTENTION, help="fused (flash) attention or materialised "
                                       "softmax; default flash, math for an ALiBi model (BLOOM: Transformers runs it "
                                       "only in its eager attention)")
    stack: str = spec_field("megatron", choices=STACKS, help="software stack: megatron (fused kernels), pytorch "
                            "(eager modules as in Hugging Face Transformers) or compiled (torch.compile); "
                            "its kernels are catalog data, stacks/*.yaml")
    sequence_parallel: bool = spec_field(False, help="Megatron sequence parallelism (shards norm/dropout activations "
                                         "over tp)")
    zero: int | None = spec_field(None, ge=0, le=3, help="ZeRO stage: 1 shards optimizer states (Megatron's "
                                  "distributed optimizer, the default on GPU systems), 2 also gradients, 3 also "
                                  "parameters; 0 replicates them")
    precision: str = spec_field("bf16", choices=PRECISION, help="precision recipe: bf16 or fp16 mixed precision "
                                "(16-bit weights and activations, fp32 master weights and optimizer states), "
                                "bf16-pure (weights, gradients and optimizer states in bf16, no master copy), or fp8 "
                                "(bf16 mixed precision with FP8 linear GEMMs, Transformer Engine); bytes "
                                "per tensor class in dse/formulas/precision.py")
    fp8_scaling: str = spec_field("delayed", choices=FP8_SCALINGS, help="precision fp8's scaling recipe: delayed "
                                  "(amax history; casts fused into the norms and the activation) or current (each "
                                  "tensor's own amax: an extra pass per cast); dse/formulas/fp8.py")
    fp8_param_gather: bool = spec_field(False, help="precision fp8: the linear weights live in FP8 only (Megatron "
                                        "--fp8-param-gather, set by Megatron-Bridge's FP8 recipes): no bf16 copy, "
                                        "the optimizer casts its fp32 shard and the distributed optimizer "
                                        "all-gathers 1 B per weight; needs ZeRO-1/2; dse/formulas/fp8.py")
    grad_dtype: str | None = spec_field(None, choices=GRAD_DTYPE, help="dtype gradients are accumulated and reduced "
                                        "in; default fp32 for mixed precision, half for bf16-pure")
    optimizer: str = spec_field("adam", choices=OPTIMIZERS)
    schedule: str = spec_field("1f1b", choices=SCHEDULES, help="pipeline schedule")
    virtual_stages: int = spec_field(1, gt=0, help="model chunks per pipeline stage (interleaved schedule)")
    kv_cache: bool | None = spec_field(None, help="pytorch/compiled stacks: Transformers' use_cache in training "
                                       "(the K/V-cache copies, which the attention then saves); default: on unless "
                                       "recompute is full, as Transformers does (it turns the cache off under "
                                       "gradient checkpointing)")
    pipeline_layout: str | None = spec_field(None, help="custom stage layout, Megatron-LM's "
                                             "--pipeline-model-parallel-layout string: stages split by |, E embedding, "
                                             "t transformer layer, m MTP depth, L loss, (..)*n and x*n repeat, e.g. "
                                             "'Et*4|(t*4|)*14tmL'; default: layers split evenly (docs/estimate.md)")
    comm_sm_share: float = spec_field(20 / 132, ge=0, lt=1, help="dualpipe: share of the GPU's SMs the all-to-all "
                                      "and pipeline communication kernels hold while they overlap compute "
                                      "(DeepSeek-V3 §3.2.2: 20 of the H800's 132)")
    overlap_grad_reduce: bool = spec_field(False, help="overlap data-parallel communication with compute: the "
                                           "gradient reduction with backward, ZeRO-1/2's weight gather with the next "
                                           "forward, ZeRO-3's prefetch (False: Megatron's default, all exposed)")
    async_tp_allreduce: bool = spec_field(True, help="overlap each column-parallel linear's backward input-gradient "
                                          "all-reduce with its weight-gradient GEMM (Megatron-LM default since 2.6)")
    grad_accumulation_fusion: bool = spec_field(True, help="megatron stack: each weight-gradient GEMM accumulates "
                                                "into the main gradient (Megatron-LM's default since 2022, "
                                                "--gradient-accumulation-fusion); false: --no-gradient-accumulation-"
                                                "fusion, or the 2021 code, one element-wise add per parameter tensor "
                                                "and micro-batch (dse/formulas/kernels/accumulate.py); the pytorch "
                                                "and compiled stacks always add (their grad_accumulate row)")
    cross_entropy_fusion: str | None = spec_field(None, choices=CROSS_ENTROPY_FUSIONS, help="megatron stack: "
                                                  "the fused vocab-parallel cross-entropy, Megatron-Core's native "
                                                  "(jit-fused) or Transformer Engine's (te: Triton, no fp32 upcast) "
                                                  "(--cross-entropy-loss-fusion --cross-entropy-fusion-impl; "
                                                  "Megatron-Bridge's performance recipes: te); default: unfused "
                                                  "(Megatron-LM's default)")
    # chiplet packages only (dse/estimate/chiplet.py); None = not set
    chiplet_scheme: str | None = spec_field(None, choices=CHIPLET_SCHEMES, help="how a layer is split over the dies "
                                            "of a chiplet package (default hecaton-2d)")
    chiplet_mesh: str | None = spec_field(None, help="RxC layout of the package's dies, e.g. 4x16 (default: the "
                                          "package's). A hardware choice made at plan time: the collectives run on "
                                          "this mesh and edge DRAM attaches along its perimeter, so a long thin "
                                          "layout has more DRAM stacks (more bandwidth and capacity, more cost); the "
                                          "estimate's hardware.rows/cols report it")
    chiplet_schedule: str | None = spec_field(None, choices=CHIPLET_SCHEDULES, help="minibatch: layer-major over "
                                              "the global batch (weights fetched once per pass); microbatch: "
                                              "micro-batch-major (Megatron gradient accumulation); auto: microbatch "
                                              "for megatron-1d and summa-2d, minibatch for hecaton-2d")
    chiplet_minibatch: int | None = spec_field(None, gt=0, help="micro-batches per mini-batch of the minibatch "
                                               "schedule (weights fetched once per mini-batch; default: the whole "
                                               "global batch)")
    chiplet_overlap: float = spec_field(1.0, unit="fraction", ge=0, le=1, help="how completely a chiplet package "
                                        "overlaps compute, NoP and DRAM (1: max of the three, 0: their sum)")
    # Storage offload (ZeRO-Infinity) and near-storage update (Smart-Infinity); see dse/formulas/offload/.
    offload_optimizer: str = spec_field("gpu", choices=OFFLOAD_OPTIMIZER,
                                        help="optimizer states + fp32 gradients on gpu, host DRAM (cpu), CXL memory "
                                             "expanders (cxl), NVMe drives, or computational storage that runs the "
                                             "update (csd)")
    offload_params: str = spec_field("gpu", choices=OFFLOAD_PARAMS,
                                     help="fp16 parameters between uses: gpu, host DRAM (cpu), CXL memory (cxl) or "
                                          "NVMe")
    ssds: int | None = spec_field(None, gt=0, help="drives used for offload; default: all drives of the hardware")
    gradient_compression: float = spec_field(1.0, unit="fraction", gt=0, le=1,
                                             help="gradient bytes sent / dense bytes (Smart-Infinity SmartComp ratio; "
                                                  "0.02 = top-1% values with their indices); 1 = no compression")
    exchange_dtype: str = spec_field("fp32", choices=EXCHANGE_DTYPES,
                                     help="dtype of the gradients sent to and params returned by the drives' "
                                          "accelerators (the paper's times use fp32; the released code fp16)")
    transfer_overlap: bool = spec_field(True, help="Smart-Infinity transfer handler (preallocated buffers, writes "
                                        "overlapped with the next loads: SU+O); false = naive SmartUpdate (SU)")
    swap_pipeline: bool = spec_field(False, help="DeepSpeed pipeline_read/pipeline_write: overlap the NVMe swap with "
                                     "the CPU optimizer step (off by default in DeepSpeed)")
    sub_group_size: float | None = spec_field(None, unit="count", gt=0,
                                              help="optimizer sub-group (elements); default DeepSpeed's 1e9, or "
                                                   "Smart-Infinity's 4e7 when the update runs on the drives (csd)")
    optimizer_buffer_count: int = spec_field(4, gt=0, help="pinned host swap buffers for optimizer state "
                                             "(DeepSpeed default 4)")
    param_buffer_count: int = spec_field(5, gt=0, help="pinned host swap buffers for NVMe-offloaded params "
                                         "(DeepSpeed default 5)")
    param_buffer_size: float = spec_field(1e8, unit="count", gt=0,
                                          help="elements per param swap buffer (DeepSpeed default 1e8)")
    aio_block_size: float = spec_field(1048576, unit="bytes", gt=0, help="DeepSpeed aio.block_size: bytes per "
                                       "NVMe request of the swapper (default 1 MiB)")
    aio_queue_depth: int = spec_field(8, gt=0, help="DeepSpeed aio.queue_depth: requests in flight per aio thread "
                                      "(default 8)")
    aio_thread_count: int = spec_field(1, gt=0, help="DeepSpeed aio.thread_count (intra_op_parallelism): aio threads "
                                       "per swap (default 1)")
    aio_overlap_events: bool = spec_field(True, help="DeepSpeed aio.overlap_events: refill the queue as requests "
                                          "complete (default); false = submit qd, wait for all")
    # Activation offload (SSDTrain); see dse/formulas/activation_offload/. Uses ssds above.
    offload_activations: str = spec_field("none", choices=OFFLOAD_ACTIVATIONS,
                                          help="write saved activations to the drives (ssd, SSDTrain) or to pinned "
                                               "host memory (host) during forward, read them back in backward")
    offload_layers: int | None = spec_field(None, ge=0, help="leading layers of each pipeline stage whose "
                                            "activations are offloaded; default (auto): the layers whose I/O "
                                            "hides, at most SSDTrain's rule; on a full GPU at least the fewest "
                                            "that fit")
    activation_io_path: str = spec_field("gds", choices=ACTIVATION_IO_PATHS,
                                         help="GPU<->drive path: GPUDirect Storage (gds) or bounce through host memory")
    activation_offload_mechanism: str = spec_field("forwarding", choices=ACTIVATION_OFFLOAD_MECHANISMS,
                                                   help="forwarding: SSDTrain's tensor cache (asynchronous writes, "
                                                        "deduplication, forwarding, prefetch); hooks: PyTorch's "
                                                        "saved-tensor hooks (torch.autograd.graph.save_on_cpu with "
                                                        "pinned memory): every saved tensor, weights included, copied "
                                                        "to host memory in forward and back in backward on the compute "
                                                        "stream (needs offload_activations host; auto offloads every "
                                                        "layer)")

    # Fine-tuning (dse/formulas/finetune.py); None = not set (the defaults below apply to lora and qlora only)
    finetune: str = spec_field("full", choices=FINETUNES, help="full: every weight trained; lora: weights frozen, "
                               "low-rank adapters trained (Hu et al. 2021); qlora: as lora, the frozen linear weights "
                               "stored quantized and dequantized for each GEMM (Dettmers et al. 2023)")
    lora_rank: int | None = spec_field(None, gt=0, help="LoRA rank r (lora, qlora; default 16)")
    lora_targets: str | None = spec_field(None, choices=LORA_TARGETS, help="linear layers with adapters: all "
                                          "(QLoRA's choice, the default), attention (q, k, v, out), qv (PEFT's "
                                          "default for Llama) or mlp")
    quantization: str | None = spec_field(None, choices=QUANTIZATIONS, help="storage of the frozen linear weights "
                                          "(qlora; default nf4: 4-bit NormalFloat with double quantization; int8)")
    lora_dropout: float = spec_field(0.0, ge=0, lt=1, help="PEFT's lora_dropout (lora, qlora): each adapter keeps a "
                                     "dropped copy of its input and the mask (0: none, PEFT's default)")
    paged_optimizer: bool = spec_field(False, help="bitsandbytes' paged optimizer (QLoRA): the optimizer states in "
                                       "unified memory, evicted to CPU memory when the GPU runs short and paged back "
                                       "for the step (needs offload_optimizer gpu)")

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * (self.dp or 1)

    def resolved(self, model, system=None) -> Plan:
        """Fill the defaults that depend on the model (and, for dp, on the system)."""
        fields = vars(self)   # every field (a frozen dataclass has no other attributes)
        return type(self)(**{**fields, **_derived(fields, model, system)})

    @classmethod
    def resolved_from(cls, arguments: dict, model, system=None) -> Plan:
        """``Plan(**arguments).resolved(model, system)``, constructed once (the estimate's scalar path).

        ``arguments`` are checked fields (:func:`dse.specs._schema.arguments`). The plan's fields are
        set as :mod:`copy` and :mod:`pickle` restore an object's, all at once, not by ``__init__``'s
        one ``object.__setattr__`` per field of a frozen dataclass (a twentieth of a new plan's estimate).
        """
        fields = {**_DEFAULTS, **arguments}
        fields.update(_derived(fields, model, system))
        plan = object.__new__(cls)
        plan.__dict__.update(fields)
        return plan


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Plan)}


def _derived(f: dict, model, system) -> dict:
    """The fields of :meth:`Plan.resolved` (``f``: a plan's fields) that default to the model's or the system's."""
    dp = f["dp"]
    tp, pp = f["tp"], f["pp"]
    per_node = system.node.gpus_per_node if system is not None and system.kind == GPU_SYSTEM else 1
    a2a = f["cp_a2a"]
    if a2a is None and f["cp_comm"] == "a2a+p2p":   # hierarchical cp: the a2a level spans one node's cp ranks
        a2a = default_a2a(f["cp"], tp, per_node)
    if dp is None:   # array-safe throughout: the vectorised search resolves plans whose fields are arrays
        tp_pp = tp * f["cp"] * pp    # the GPUs of one replica: tp x cp x pp (Megatron order tp, cp, dp, pp)
        dp = maximum(where(per_node % tp_pp == 0, per_node // tp_pp, 1), 1)
    gb = f["global_batch"]
    if gb is None:
        gb = f["micro_batch"] * dp * where(pp == 1, 1, 4 * pp)
    zero = f["zero"]
    if zero is None:
        zero = 1 if system is None or system.kind == GPU_SYSTEM else 0
    sg = f["sub_group_size"]
    if sg is None:
        sg = 4e7 if f["offload_optimizer"] == "csd" else 1e9
    seq = f["seq_len"] if f["seq_len"] is not None else (model.seq_len or min(TRAINING_SEQ_LEN, model.max_seq_len))
    tgt = f["target_len"]
    if tgt is None and getattr(model, "architecture", "decoder") == "encoder-decoder":
        tgt = model.target_len or seq
    grad = f["grad_dtype"] or DEFAULT_GRAD_DTYPE[f["precision"]]
    adapted = f["finetune"] != "full"
    rank = f["lora_rank"] if f["lora_rank"] is not None or not adapted else 16
    targets = f["lora_targets"] if f["lora_targets"] is not None or not adapted else "all"
    quant = f["quantization"] if f["quantization"] is not None or f["finetune"] != "qlora" else "nf4"
    etp = f["etp"] if f["etp"] is not None else tp   # expert tensor parallelism: Megatron's default, tp
    return {"dp": dp, "etp": etp, "cp_a2a": a2a, "global_batch": gb, "zero": zero, "seq_len": seq, "target_len": tgt,
            "attention": default_attention(f["attention"], model),
            "sub_group_size": sg, "grad_dtype": grad,
            "lora_rank": rank, "lora_targets": targets, "quantization": quant}


def default_attention(attention: str | None, model) -> str:
    """The plan's attention kernel: ``attention`` where given, else flash -- or math for a model with ALiBi (BLOOM:
    BloomPreTrainedModel declares no SDPA or flash support, Transformers 5.24 modeling_bloom.py, so eager is its only
    attention; the rule "ALiBi runs only eager attention", :mod:`dse.specs.rules`, refuses flash asked for), or for a
    model whose Transformers class has no SDPA path (``eager_attention``: GPTNeoPreTrainedModel declares eager and
    flash_attention_2 only, Transformers 5.24 modeling_gpt_neo.py GPT_NEO_ATTENTION_CLASSES)."""
    if attention is not None:
        return attention
    return "math" if getattr(model, "alibi", False) or getattr(model, "eager_attention", False) else "flash"


def expert_tp(plan: Plan) -> Any:
    """The plan's expert tensor-parallel degree (``plan.etp``; unset: tp, Megatron-Core's default)."""
    et = getattr(plan, "etp", None)
    return plan.tp if et is None else et


def folded(plan: Plan) -> bool:
    """The MoE layers' expert tensor parallelism differs from tp somewhere (MoE Parallel Folding; array plans: in
    some element, and the estimate then takes the folded path element by element)."""
    return differs(plan.tp, expert_tp(plan))


def differs(t: Any, et: Any) -> bool:
    """:func:`folded` of a tp and an etp degree (numbers or arrays)."""
    if et is t:
        return False
    same = et == t
    return not (same if type(same) is bool else bool(same.all()))


# ----------------------------------------------------------------------------- validity: the rule table's two faces
# The rules themselves are one table, dse/specs/rules.py; these functions raise from it (scalar plans) or
# evaluate it as masks (the vectorised search).

CHIPLET_ONLY_FIELDS = tuple(rules.CHIPLET_ONLY_FLAGS)


def check_plan(plan: Plan, model, where: str = "plan", system=None) -> None:
    """Raise :class:`InputError` for a plan that cannot run this model at all.

    (A plan that runs but does not fit in memory is *infeasible*, not an error.)
    ``model`` must be resolved (kv_heads, ffn_hidden filled in). With ``system``,
    also check that the hardware has the tiers the plan offloads to.
    Rules: :data:`dse.specs.rules.OFFLOAD_RULES` and :data:`~dse.specs.rules.MODEL_RULES`.
    """
    rules.check((*rules.OFFLOAD_RULES, *rules.MODEL_RULES, *rules.CONTEXT_RULES), plan, model, system, where)


def check_offload(plan: Plan, system=None, where: str = "plan") -> None:
    """Offload choices that cannot run at all: the tier is missing, or the combination is undefined."""
    rules.check(rules.OFFLOAD_RULES, plan, None, system, where)


def check_activation_offload(plan: Plan, model, system, where: str = "plan") -> None:
    """Activation-offload choices that cannot run at all (SSDTrain; dse/estimate/activation_offload.py)."""
    rules.check(rules.ACTIVATION_OFFLOAD_RULES, plan, model, system, where)


def check_no_chiplet_fields(plan: Plan, system, where: str = "plan") -> None:
    """The chiplet-only plan fields are an error on a GPU system (they would be silently ignored)."""
    rules.check((rules.NO_CHIPLET_FIELDS,), plan, None, system, where)


def plan_rules(plan: Plan, model, system=None) -> dict:
    """The rules that make a plan invalid, as ``{rule: ok}``, array-safe (the vectorised search).

    The same table (:mod:`dse.specs.rules`) that :func:`dse.estimate.make_plan` raises from, for
    the hardware's kind (its backend, :mod:`dse.estimate.backends`): on a GPU system
    :func:`check_offload` and :func:`check_plan`, the chiplet-only fields and
    :func:`check_activation_offload`; on a chiplet package
    :func:`dse.specs.chiplet.check_chiplet_plan` and the activation-offload rules. ``ok`` is a
    bool, or a numpy bool array when numeric plan fields are arrays (broadcast shapes
    allowed); a combination is valid where every rule holds. String, boolean and
    optional-or-None fields must be scalars.
    """
    if system is None:
        return gpu_plan_rules(plan, model, None)
    from dse.estimate.backends import backend

    return backend(system).plan_rules(plan, model, system)


def gpu_plan_rules(plan: Plan, model, system=None) -> dict:
    """:func:`plan_rules` on a GPU system (``system`` None: the rules that do not need one)."""
    return rules.holds(rules.GPU_SYSTEM_RULES, plan, model, system)


def _offload_rules(plan: Plan, system) -> dict:
    """:func:`check_offload` as rules."""
    return rules.holds(rules.OFFLOAD_RULES, plan, None, system)


def activation_offload_rules(plan: Plan, model, system) -> dict:
    """:func:`check_activation_offload` as rules."""
    return rules.holds(rules.ACTIVATION_OFFLOAD_RULES, plan, model, system)
