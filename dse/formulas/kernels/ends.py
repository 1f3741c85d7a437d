"""The kernels of the input side (embedding) and of the output side (final norm, LM head, loss).

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there).
"""

from __future__ import annotations

from dse.formulas._array import Num, where
from dse.formulas.kernels.layer import _per_gpu
from dse.formulas.kernels.rows import Row, Table

__all__ = ["embedding_kernels", "embedding_mask_row", "embedding_gradient", "head_kernels", "vocab_parallel_loss",
           "embedding_projections", "LOSS_KERNELS", "CROSS_ENTROPY_KERNELS"]


def embedding_kernels(s: Num, b: Num, h: Num, *, tp: Num = 1, sequence_parallel: bool = False,
                      dropout: bool = True, position: str = "learned", bytes_per_element: Num = 2,
                      comm_bytes_per_element: Num | None = None, vocab: Num = 0, grad_bytes: Num = 2) -> Table:
    """The input side's kernels on one GPU for one micro-batch: the vocab-parallel lookup and its all-reduce, and
    (``vocab`` given) the table's dense gradient.

    Formula: lookup (+ positions, dropout) e s b h bytes forward; all-reduce of e s b h (forward only); the word
    table's gradient (:func:`embedding_gradient`): (2 e + 2 g) V/t h bytes backward; saved: 8 s b token ids (+ 8 s b
    position ids, learned positions) + s b out-of-shard mask (t > 1) + s b h r dropout mask
    Source: Megatron-LM VocabParallelEmbedding (Shoeybi et al. 2019, arXiv 1909.08053 §3); saved bytes as in
    transformer.embedding_activation_bytes.

    Returns:
        kernel name -> row [dict]

    >>> k = embedding_kernels(1024, 1, 1600)   # GPT-2 XL
    >>> k["embedding"]["saved"], k["embedding_allreduce"]["pass"]
    (1654784, 'forward')
    """
    r = 1 / tp if sequence_parallel else 1
    tok = s * b
    ids = 16 * tok if position == "learned" else 8 * tok
    saved = ids + where(tp > 1, tok, 0 * s) + where(dropout, tok * h * r, 0 * s)
    comm = bytes_per_element if comm_bytes_per_element is None else comm_bytes_per_element
    msg = comm * tok * h
    t = {"embedding": {"kind": "elementwise", "bytes": bytes_per_element * tok * h, "saved": saved},
         "embedding_allreduce": {"kind": "collective", "op": "allreduce", "group": "tp", "comm": msg,
                                 "pass": "forward", "saved": 0}}
    t["embedding_mask"] = embedding_mask_row(tok, h, tp, bytes_per_element)   # t > 1: the other shards' tokens
    if not (type(vocab) is int and vocab == 0):
        t.update(embedding_gradient(vocab, h, tp=tp, bytes_per_element=bytes_per_element, grad_bytes=grad_bytes))
    return t


def embedding_mask_row(tokens: Num, h: Num, tp: Num, bytes_per_element: Num = 2) -> Row:
    """The masking of a vocab-parallel lookup on one GPU (t > 1): the tokens of other shards' rows read as zero.

    Formula: forward e T h (t-1)/t bytes (the out-of-shard tokens' rows zeroed after the lookup; the id masks touch
    8-byte ids, left out), 8 kernels (two comparisons and their or, the ids' clone and offset, the masked fill of
    the ids, the rows' masked index_put: its nonzero and the put); backward 2 e T h bytes (the gradient cloned with
    those rows zeroed, index_put's backward), 2 kernels; t = 1: none
    Source: Megatron-LM megatron/core/tensor_parallel/layers.py VocabParallelEmbedding.forward (commit 55817ec:
    ``input_mask = (input_ < start) | (input_ >= end)``, ``masked_input = input_.clone() - start``,
    ``masked_input[input_mask] = 0``, ``output_parallel[input_mask, :] = 0.0``)

    Args:
        tokens: T, tokens of the micro-batch (s b) [count]
    Returns:
        the row [dict]

    >>> embedding_mask_row(1024, 2048, 8)["bytes"] / 2**20   # 7 of 8 tokens' rows zeroed: MiB
    3.5
    """
    share = where(tp > 1, 1 - 1 / tp, 0 * tp)
    on = where(tp > 1, 1, 0)
    return {"kind": "elementwise", "bytes": bytes_per_element * tokens * h * share,
            "bytes_backward": 2 * bytes_per_element * tokens * h * on, "kernels": 8 * on, "kernels_backward": 2 * on,
            "saved": 0}


def embedding_gradient(vocab: Num, h: Num, *, tp: Num = 1, bytes_per_element: Num = 2, grad_bytes: Num = 2) -> Table:
    """The word embedding table's gradient on one GPU for one micro-batch: dense, zeroed, then accumulated.

    Formula: backward (e + e + 2 g) V/t h bytes: the dense gradient of the V/t x h table zero-filled (e V/t h), the
    looked-up rows' gradients added into it (T h, left out), and the whole table's gradient added into the
    accumulated one (read e and g, write g per element); 3 kernels (the fill, the scatter-add, the accumulation);
    nothing forward, nothing saved
    Source: PyTorch aten/src/ATen/native/cuda/Embedding.cu (embedding_dense_backward_cuda: ``at::zeros`` of
    num_weights x h, then embedding_backward_feature_kernel, or the sort-and-segment path above 3,072 indices);
    the gradient is dense, not sparse (nn.Embedding's default ``sparse=False``, and Megatron's F.embedding call);
    it is added to the micro-batches' sum: Megatron's DDP hook ``param.main_grad.add_(param.grad)`` (no fused
    weight-gradient GEMM writes an embedding's gradient), or autograd's AccumulateGrad into ``.grad`` (DeepSpeed)

    Args:
        vocab: V, vocabulary rows of the table (padded) [count]
        h: hidden size [count]
        grad_bytes: g, bytes per element of the accumulated gradient [bytes]
    Returns:
        kernel name -> row [dict]

    >>> t = embedding_gradient(50304, 2048)   # GPT-2's padded vocabulary, hidden 2,048, fp16 gradients
    >>> t["embedding_grad"]["bytes_backward"] / 2**20, t["embedding_grad"]["kernels_backward"]   # MiB
    (786.0, 3)
    """
    e, g = bytes_per_element, grad_bytes
    table = _per_gpu(vocab, tp) * h
    return {"embedding_grad": {"kind": "elementwise", "bytes": 0 * table, "bytes_backward": (2 * e + 2 * g) * table,
                               "kernels": 0, "kernels_backward": 3, "saved": 0}}


def head_kernels(s: Num, b: Num, h: Num, vocab: Num, *, tp: Num = 1, sequence_parallel: bool = False,
                 norm: str = "layernorm", final_norm: bool = True, bytes_per_element: Num = 2,
                 logits_bytes: Num = 4, fusion: str | None = None) -> Table:
    """The output side's kernels on one GPU for one micro-batch: final norm, LM-head GEMM, fp32 loss.

    Formula: LM head GEMM (s b, h, V/t), its input gradient's all-reduce e s b h (backward, t > 1; sequence
    parallel: an all-gather forward and a reduce-scatter backward); loss over N = s b V/t logits of e_l bytes
    (:func:`vocab_parallel_loss`, unfused: (c + 8 e_l) N bytes forward, (c + 2 e_l) N backward, c = e + e_l the
    upcast of the e-byte logits and its backward where e_l > e; ``fusion``: a fused kernel's); saved: final-norm
    input e s b h r (+ statistics), head input e s b h r, the loss's softmax (fp32: 4 s b V/t)
    Source: Korthikanti et al. 2022 (arXiv 2205.05198) §4.3 (4sbV/t for the vocab-parallel cross-entropy);
    Megatron-LM megatron/model/language_model.py parallel_lm_logits (commit 55817ec: the LM head's input through
    copy_to_tensor_model_parallel_region, or async all-reduce of its gradient; sequence parallel: gathered);
    saved bytes as in transformer.head_activation_bytes.

    The final norm's time is not charged (one norm against a layer's two per layer, and L layers).

    Returns:
        kernel name -> row [dict]

    >>> k = head_kernels(2048, 1, 4096, 32000, norm="rmsnorm")   # Llama-2-7B
    >>> k["lm_head"]["n"], k["loss"]["saved"] / 2**20   # vocabulary columns; fp32 softmax, MiB
    (32000, 250.0)
    """
    e = bytes_per_element
    r = 1 / tp if sequence_parallel else 1
    stats = 8 if norm == "layernorm" else 4
    tok = s * b
    v_loc = _per_gpu(vocab, tp)
    t = {}
    if final_norm:
        t["final_norm"] = {"kind": "elementwise", "bytes": 0, "saved": (e * tok * h + stats * tok) * r}
    t["lm_head"] = {"kind": "gemm", "m": tok, "k": h, "n": v_loc, "batch": 1, "split": "column", "class": "head",
                    "saved": e * tok * h * r, "flops": 2 * tok * h * v_loc}
    if sequence_parallel:   # the final norm's sequence shards gathered for the LM head, the gradient scattered back
        t["lm_head_gather"] = {"kind": "collective", "op": "allgather", "group": "tp", "comm": e * tok * h,
                               "pass": "forward", "saved": 0}
        t["lm_head_dgrad_scatter"] = {"kind": "collective", "op": "reduce_scatter", "group": "tp", "comm": e * tok * h,
                                      "pass": "backward", "hidden_by": "lm_head", "saved": 0}
    else:
        t["lm_head_dgrad_allreduce"] = {"kind": "collective", "op": "allreduce", "group": "tp", "comm": e * tok * h,
                                        "pass": "backward", "hidden_by": "lm_head", "saved": 0}
    t.update(vocab_parallel_loss(tok, v_loc, tp=tp, bytes_per_element=e, logits_bytes=logits_bytes, fusion=fusion))
    return t


def embedding_projections(head: Table, embedding: Table, tokens: Num, h: Num, embedding_dim: Num, *,
                          bytes_per_element: Num = 2) -> tuple[Table, Table]:
    """(head, embedding) tables of a word embedding narrower than the layers (OPT-350m: e = 512, h = 1,024).

    Formula: project_in, GEMM (T, e, h) after the lookup, saves its e T e-byte input; project_out, GEMM (T, h, e)
    before the LM head, saves its e T h input; the LM head's GEMM (T, e, V/t) reads the e-wide output (its saved
    input e T e, FLOPs 2 T e V/t); each GEMM 2 T e h FLOPs forward, its data and weight gradients backward; the
    weights whole on every GPU (not split over tp)
    Source: Transformers 5.24 modeling_opt.py (OPTDecoder: project_in = nn.Linear(word_embed_proj_dim, h,
    bias=False) on the embedding output, project_out = nn.Linear(h, word_embed_proj_dim, bias=False) after the final
    norm; OPTForCausalLM.lm_head = nn.Linear(word_embed_proj_dim, V, bias=False)).

    Args:
        head: the output side's table (:func:`head_kernels`) [dict]
        embedding: the input side's table (:func:`embedding_kernels`) [dict]
        tokens: T, tokens of the micro-batch on one GPU (s b) [count]
        embedding_dim: e, the word embedding's width [count]
    Returns:
        (head table, embedding table) [dict]

    >>> head, emb = embedding_projections(head_kernels(1024, 1, 1024, 50272), embedding_kernels(1024, 1, 1024),
    ...                                   1024, 1024, 512)
    >>> head["lm_head"]["k"], head["project_out"]["n"], emb["project_in"]["k"], emb["project_in"]["flops"] / 2**30
    (512, 512, 512, 1.0)
    """
    e, w = bytes_per_element, embedding_dim
    lm = head["lm_head"]
    head = {**head, "project_out": {"kind": "gemm", "m": tokens, "k": h, "n": w, "batch": 1, "split": "",
                                    "saved": e * tokens * h, "flops": 2 * tokens * h * w},
            "lm_head": {**lm, "k": w, "saved": e * tokens * w, "flops": 2 * tokens * w * lm["n"]}}
    embedding = {**embedding, "project_in": {"kind": "gemm", "m": tokens, "k": w, "n": h, "batch": 1, "split": "",
                                             "saved": e * tokens * w, "flops": 2 * tokens * w * h}}
    return head, embedding


#: kernels Megatron's vocab-parallel cross-entropy launches, (forward, backward), by ``fusion`` (None: unfused), and
#: those of the loss around it (the [b s] <-> [s b] copies of the labels and the loss, the masked mean):
#: see :func:`vocab_parallel_loss`
CROSS_ENTROPY_KERNELS = {None: (18, 8), "native": (8, 4), "te": (2, 1)}
LOSS_KERNELS = (6, 3)


def vocab_parallel_loss(tokens: Num, vocab_local: Num, *, tp: Num = 1, bytes_per_element: Num = 2,
                        logits_bytes: Num = 4, fusion: str | None = None) -> Table:
    """Megatron's vocab-parallel cross-entropy on one GPU for one micro-batch: its passes over the logits.

    Formula: N = T V/t logits (T = s b tokens) of e bytes from the LM head, e_l bytes in the loss;
    unfused (``fusion`` None, Megatron-LM's default): upcast c = e + e_l where e_l > e (else 0), forward
    (c + 8 e_l) N bytes: max (e_l), subtract the max (2 e_l), exp in place (2 e_l), sum (e_l), divide by the sum in
    place (2 e_l); backward (c + 2 e_l) N: the softmax times the loss gradient in place (2 e_l), the upcast's
    backward (e_l + e); 18 kernels forward (the upcast; max; subtract; the target mask's three comparisons, clone,
    offset and masked fill; arange, gather, clone, masked fill of the predicted logit; exp, sum, log, subtract,
    divide), 8 backward (arange, the mask's cast and 1 - mask, the one-hot's gather, subtract and scatter, the
    multiply, the upcast's backward); t > 1: three all-reduces of 4 T bytes (max, predicted logit, sum); saved:
    the fp32 softmax, 4 N.
    native (Megatron-Core's jit-fused functions): forward (e + 5 e_l) N (upcast and max; subtract, exp and sum;
    divide), backward (e_l + e) N (the gradient, cast back); 8 and 4 kernels; all-reduces of 4 T and 8 T bytes
    (the max; the predicted logit and the sum, batched); saved 4 N.
    te (Transformer Engine's Triton kernels, the logits' own dtype): forward 3 e N (the online-softmax pass reads
    them, the loss kernel reads them again and writes the gradient in place), backward 2 e N (the gradient times
    the loss gradient); 2 and 1 kernels; an all-gather of 12 T t bytes (each rank's max, sum and target logit);
    saved: that gradient, e N.
    The loss around it: 6 kernels forward, 3 backward (the labels' and the loss's [b s] <-> [s b] copies, the
    mask multiply, two sums and the division of the masked mean, and their gradients); T elements each.
    Source: Megatron-LM megatron/core/tensor_parallel/cross_entropy.py (_VocabParallelCrossEntropy, commit
    55817ec, 2022; the same passes in HEAD's VocabParallelCrossEntropy: float(), max, -=, exp, sum, div_, mul_),
    megatron/model/gpt_model.py post_language_model_processing (``output.float()`` unless fp16_lm_cross_entropy,
    the [s b] transposes), pretrain_gpt.py loss_func (the masked mean); microsoft/Megatron-DeepSpeed
    megatron/model/gpt_model.py (the same cross-entropy; GPTModelPipe upcasts with float16_to_fp32);
    megatron/core/fusions/fused_cross_entropy.py (native: calculate_logits_max, calculate_predicted_logits,
    calculate_cross_entropy_loss, calculate_gradients, one all-reduce of the concatenated predicted logits and
    sums); Transformer Engine transformer_engine/common/triton/cross_entropy.py (online_softmax_kernel,
    cross_entropy_kernel writing the gradient into the input, element_mul_kernel) and
    transformer_engine/pytorch/triton/cross_entropy.py (the all-gather of m, d and the target logit).

    Args:
        tokens: T, tokens of the micro-batch (s b) [count]
        vocab_local: V/t, vocabulary columns on this GPU [count]
        fusion: the fused cross-entropy: native or te (None: unfused) [choice]
    Returns:
        kernel name -> row [dict]

    >>> t = vocab_parallel_loss(1024, 50304)   # GPT-2's padded vocabulary, one sequence of 1,024 tokens
    >>> t["loss"]["bytes"] / (1024 * 50304), t["loss"]["bytes_backward"] / (1024 * 50304)   # bytes per logit
    (38.0, 14.0)
    >>> t = vocab_parallel_loss(8192, 32064, tp=4, fusion="te")   # Llama 3 at TP 4, Transformer Engine's kernels
    >>> t["loss"]["bytes"] / (8192 * 32064), t["loss"]["kernels"], t["loss_stats_allgather"]["comm"]
    (6.0, 8, 393216)
    """
    if fusion not in CROSS_ENTROPY_KERNELS:
        raise ValueError(f"fusion {fusion!r}; expected one of native, te, or None")
    n, e, el = tokens * vocab_local, bytes_per_element, logits_bytes
    stats: Num = 4 * tokens
    if fusion == "te":
        fwd, bwd, saved = 3 * e * n, 2 * e * n, e * n
        coll = {"loss_stats_allgather": {"kind": "collective", "op": "allgather", "group": "tp",
                                         "comm": 3 * stats * tp, "pass": "forward", "saved": 0}}
    elif fusion == "native":
        fwd, bwd, saved = (e + 5 * el) * n, (el + e) * n, 4 * n
        coll = {"loss_max_allreduce": _stat_allreduce(stats), "loss_sum_allreduce": _stat_allreduce(2 * stats)}
    else:
        cast = where(el > e, e + el, 0 * el)
        fwd, bwd, saved = (cast + 8 * el) * n, (cast + 2 * el) * n, 4 * n
        row = _stat_allreduce(stats)
        coll = {"loss_max_allreduce": row, "loss_target_allreduce": dict(row), "loss_sum_allreduce": dict(row)}
    f, b = CROSS_ENTROPY_KERNELS[fusion]
    return {"loss": {"kind": "elementwise", "bytes": fwd, "bytes_backward": bwd, "kernels": f + LOSS_KERNELS[0],
                     "kernels_backward": b + LOSS_KERNELS[1], "saved": saved}, **coll}


def _stat_allreduce(comm: Num) -> Row:
    """A forward all-reduce over the tensor-parallel group of ``comm`` bytes of per-token statistics."""
    return {"kind": "collective", "op": "allreduce", "group": "tp", "comm": comm, "pass": "forward", "saved": 0}
