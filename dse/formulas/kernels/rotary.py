"""The rotary position kernels of a layer's table beyond the fused kernel: a stack's partial rotary positions and
fused-QKV layout (GPT-NeoX, Phi, Falcon), and Megatron-Core's unfused RoPE (a YaRN attention factor other than 1).

Part of :mod:`dse.formulas.kernels` (the row format and the symbols are there); :func:`dse.formulas.kernels.layer_kernels`
builds its rotary rows with these.
"""

from __future__ import annotations

from dse.formulas._array import Num
from dse.formulas.kernels.rows import Row, Table

__all__ = ["unfused_rotary_row"]


def _rotary_layout(table: Table, rotary_fraction: Num, q: Num, kv: Num, *, fused: bool, cat: bool = False) -> Table:
    """A stack's layer table with partial rotary positions or a fused QKV (GPT-NeoX, Phi, Falcon).

    Formula: partial (rho < 1): rotary x rho + torch.cat of the two shares (2 passes of q and k, 2 kernels) forward;
    backward each share's slice_backward (zero fill + copy) and their sum: 7 passes of q and k, 5 kernels each.
    ``cat`` (Phi-3: its apply_rotary_pos_emb slices and concatenates at any rho): at rho = 1 the cat of q with an
    empty q_pass (a strided copy, 2 passes of q and k) forward; backward q_pass's slice_backward fills the whole
    gradient (its copy moves nothing; q[..., :d] over the whole head is q itself: no slice) and an add sums it with
    q_rot's: 4 passes of q and k, 2 kernels each (trace of Phi3ForCausalLM against Llama's rotary in the same layer:
    scripts/trace_stack.py phi3); eager attention's matmuls then read the cat's contiguous q and K as at rho < 1; with
    SDPA and no KV cache the V it keeps is a view of the fused projection's output, which stays alive: + q + kv saved
    (the same trace with use_cache off: V's storage q + 2 kv). Fused:
    flash keeps the rotated q, k beside the buffer V views (+ q + kv), or with the cache (kv_copy) the copies instead
    (- qkv - kv); eager (fp32 variant): no q copy after the cat (- 2 q), without the cache a V copy (+ 2 kv), with it
    - 2 q kept; its three gradient copies become one cat (same bytes, - 2 kernels); separate projections, eager:
    with a partial rotary (Phi) the matmul reads the cat's contiguous q, no copy (- 2 q, - 1 kernel), and without the
    cache (not grouped) copies V's view and, unless a cat wrote K, K's (+ 2 kv each; Phi, OLMo 2 traces). Strided (non-vectorized): the cats
    and slice copies (2 passes of q and k each way), the gradient cat (2 qkv), eager's V copy. Packed: as kept before
    Source: transformers 5.24 modeling_gpt_neox apply_rotary_pos_emb (q[..., :rotary_dim], torch.cat) and
    GPTNeoXAttention (qkv.view(...).transpose(1, 2).chunk(3)); the aten traces of GPTNeoXForCausalLM and
    PhiForCausalLM (scripts/trace_stack.py gpt_neox, phi; tests/fixtures/pytorch_stack_trace_gpt_neox.json, _phi.json).

    ``q``, ``kv``: bytes of the query tensor and of one key or value tensor on this GPU.

    >>> t = {"rotary": {"kind": "elementwise", "bytes": 20.0, "bytes_backward": 30.0, "kernels": 10,
    ...                 "kernels_backward": 18, "saved": 0}, "attention": {"kind": "flash", "saved": 10.0}}
    >>> r = _rotary_layout(t, 0.25, 1.0, 1.0, fused=True)
    >>> r["rotary"]["bytes"], r["rotary"]["bytes_backward"], r["rotary"]["kernels_backward"], r["attention"]["saved"]
    (9.0, 21.5, 28, 12.0)
    """
    out = dict(table)
    whole = type(rotary_fraction) in (int, float) and rotary_fraction == 1
    if cat and whole and "bytes_backward" in out.get("rotary", {}):   # Phi-3 at rho = 1: the cat, q_pass's fill
        row = out["rotary"]
        out["rotary"] = {**row, "bytes": row["bytes"] + 2 * (q + kv),
                         "bytes_backward": row["bytes_backward"] + 4 * (q + kv),
                         "kernels": row["kernels"] + 2, "kernels_backward": row["kernels_backward"] + 4,
                         **_more(row, strided=2 * (q + kv))}
    partial = not whole or cat   # a cat writes q and k contiguous (eager attention below)
    if not whole and "bytes_backward" in out.get("rotary", {}):   # a stack's unfused rotary (compiled: fused)
        row = out["rotary"]
        out["rotary"] = {**row, "bytes": row["bytes"] * rotary_fraction + 2 * (q + kv),
                         "bytes_backward": row["bytes_backward"] * rotary_fraction + 7 * (q + kv),
                         "kernels": row["kernels"] + 2, "kernels_backward": row["kernels_backward"] + 10,
                         **({"packed": row["packed"] * rotary_fraction} if "packed" in row else {}),   # cos, sin
                         **_more(_scaled_parts(row, rotary_fraction), strided=2 * (q + kv),
                                 strided_backward=2 * (q + kv))}
    cache = "kv_copy" in out
    if cat and not fused and not cache and "attention" in out:   # Phi-3: V, a view of qkv_proj's output, keeps it
        row = out["attention"]   # alive (+ q + kv over the separate variant's V); the cache's copy instead does not
        out["attention"] = {**row, "saved": row["saved"] + q + kv}
    if fused and "attention" in out:
        kept = q + kv - ((q + 3 * kv) if cache else 0)
        row = out["attention"]   # the hooks pack q, k, v, the output and the log-sum-exp at their own sizes
        out["attention"] = {**row, "saved": row["saved"] + kept, "packed": row.get("packed", row["saved"])}
        if "attention_copies" in out:    # the q, k, v gradients' cat reads strided views (generic CatArrayBatchedCopy)
            out["attention_copies"] = {**out["attention_copies"],
                                       **_more(out["attention_copies"], strided_backward=2 * (q + 2 * kv))}
    if fused and "softmax" in out and "bytes_backward" in out["softmax"]:   # eager attention (the fp32 variant)
        row = out["softmax"]
        out["softmax"] = {**row, "saved": row["saved"] - (2 * q if cache else 0),
                          "packed": row.get("packed", row["saved"]),
                          "bytes": row["bytes"] - (2 * q if partial else 0) + (0 if cache else 2 * kv),
                          "kernels": row["kernels"] - (1 if partial else 0) + (0 if cache else 1),
                          "kernels_backward": row["kernels_backward"] - 2,
                          **_more(row, strided=0 if cache else 2 * kv, strided_backward=2 * (q + 2 * kv))}
    elif "softmax" in out and out["softmax"].get("kernels", 1) > 1 and (partial or (not cache and kv == q)):
        row = out["softmax"]   # separate, eager (unfused): the views the matmuls copy (grouped: repeat_kv's copies)
        copies = 0 if cache or kv < q else (1 if partial else 2)      # V's, and K's unless a cat wrote it
        out["softmax"] = {**row, "bytes": row["bytes"] - (2 * q if partial else 0) + 2 * kv * copies,
                          "kernels": row["kernels"] - (1 if partial else 0) + copies}
    return out


def _more(row: Row, **amounts: Num) -> Row:
    """A row's rated parts (``strided``, ``softmax``, per side) with ``amounts`` bytes added (at the activation's
    width: also to the row's ``strided_passes`` where it has them)."""
    passes = {k.replace("strided", "strided_passes"): v for k, v in amounts.items() if "strided" in k}
    return {**{k: row.get(k, 0) + v for k, v in amounts.items()}, **{k: row[k] + v for k, v in passes.items() if k in row}}


def _scaled_parts(row: Row, ratio: Num) -> Row:
    """A row's strided and unvectorized parts (bytes and passes, per side) over ``ratio`` times the elements."""
    return {k: v * ratio for k, v in row.items() if k.startswith(("strided", "unvectorized"))}


def unfused_rotary_row(qk_bytes: Num) -> Row:
    """Megatron-Core's unfused rotary embedding of Q and K (the path a YaRN attention factor other than 1 takes).

    Formula: per tensor of E = e T n d bytes (Q, then K): forward t cos (read E, write E), rotate_half's negation
    (E/2, E/2) and torch.cat (E, E), x sin (E, E), the sum (2E, E), the final torch.cat with the empty pass-through
    part (E, E): 12 E, and six small kernels on the (s, d) frequencies (cos, sin, x mscale, casts): 12 kernels;
    backward the two products' input gradients (2E each), the negation (E), the chunk's concatenated gradient (2E),
    the sum of the two paths (3E), the empty pass-through slice's gradient written as zeros of the input's size
    (slice_backward, E) and added to it (3E): 14 E, 7 kernels. Q and K: bytes 12 and 14 x qk_bytes, 24 and 14
    kernels (the
    fused kernel reads and writes once: 2 x qk_bytes, 1 and 1). Counted op by op under a TorchDispatchMode on
    PyTorch (tests/test_moe_small_experts.py).
    Source: Megatron-Core ``apply_rotary_pos_emb`` (megatron/core/models/common/embeddings/rope_utils.py,
    core_v0.16): ``if mscale != 1.0: warnings.warn("mscale=... is not supported by TE's fused RoPE. Using unfused
    implementation.")``, then ``_apply_rotary_pos_emb_bshd``: ``cos_ = (torch.cos(freqs) * mscale).to(t.dtype)``,
    ``t = (t * cos_) + (_rotate_half(t, rotary_interleaved) * sin_)``, ``torch.cat((t, t_pass), dim=-1)``; the
    attention passes ``mscale=_yarn_get_concentration_factor_from_config(config)`` for query and key alike
    (megatron/core/transformer/attention.py).

    Args:
        qk_bytes: e T (a + kv) d, the bytes of Q and K on this GPU [bytes]
    Returns:
        the rotary row [dict]

    >>> r = unfused_rotary_row(2 * 4096 * (64 + 8) * 64)   # gpt-oss-120b: MB forward and backward
    >>> r["bytes"] / 1e6, r["bytes_backward"] / 1e6, r["kernels"], r["kernels_backward"]
    (452.984832, 528.482304, 24, 14)
    """
    return {"kind": "elementwise", "bytes": 12 * qk_bytes, "bytes_backward": 14 * qk_bytes, "kernels": 24,
            "kernels_backward": 14, "saved": 0}
