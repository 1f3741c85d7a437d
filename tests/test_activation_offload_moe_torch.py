"""What an MoE layer's MLP saves for backward in PyTorch, against dse's tensors of it (activation offload of MoE).

Transformers 5.24's ``MixtralSparseMoeBlock`` and ``Qwen3MoeSparseMoeBlock`` (bf16, CPU, the default
``experts_implementation="grouped_mm"``: sort the k routed copies by expert, one grouped GEMM up, the gated
activation, one down, weight by the router's probability, back to token order; Megatron-Core's permute /
GroupedMLP / unpermute in one function) run their forward under saved-tensor hooks that record every tensor
autograd saves. Checked, exactly, with nothing tuned:

- the unique non-parameter buffers (what stays alive on the GPU, and what SSDTrain's deduplicating forwarding
  writes) are :func:`dse.formulas.activation_offload.moe_mlp_saved_terms` with the eager SiLU-GLU's four
  T k F tensors (``stacks/pytorch.yaml``'s ``silu_glu``: gate output, SiLU output, up output, their product;
  Megatron's fused SwiGLU keeps three) plus Transformers' routing bookkeeping, which dse does not count: the
  top-k renormalisation's fp32 sum and values (4 T + 4 T k bytes), three int64 index tensors of the T k copies
  (24 T k), the weight of each copy (4 T k in fp32, Qwen3-MoE's 2 T k in bf16) and the int32 expert offsets
  (4 E) -- 68 bytes per token at k = 2 against 33 KiB per token for Mixtral 8x7B's h = 4096 (0.2 %);
- what ``save_on_cpu`` copies (every save, views at their own size, parameters included) is the same plus the
  router's and all experts' weights (the grouped GEMM saves the whole 3-D expert tensors) and the offsets once more.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from dse.formulas import activation_offload as AO  # noqa: E402

pytestmark = [pytest.mark.torch]

ROOT = Path(__file__).resolve().parent.parent


def _block(kind: str, h: int, f: int, experts: int, k: int):
    if kind == "mixtral":
        from transformers import MixtralConfig
        from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

        cfg = MixtralConfig(hidden_size=h, intermediate_size=f, num_local_experts=experts, num_experts_per_tok=k,
                            experts_implementation="grouped_mm")
        return MixtralSparseMoeBlock(cfg)
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    cfg = Qwen3MoeConfig(hidden_size=h, moe_intermediate_size=f, num_experts=experts, num_experts_per_tok=k,
                         norm_topk_prob=True, experts_implementation="grouped_mm")
    return Qwen3MoeSparseMoeBlock(cfg)


def saved_by_torch(kind: str, tok: int, h: int, f: int, experts: int, k: int) -> tuple[int, int, int]:
    """(unique non-parameter bytes saved, bytes every save packs, parameter bytes) of one MoE block's forward."""
    torch.manual_seed(0)
    block = _block(kind, h, f, experts, k).to(torch.bfloat16)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.02)
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    unique: dict[int, int] = {}
    packed = 0

    def pack(t):
        nonlocal packed
        packed += t.numel() * t.element_size()
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            unique[storage.data_ptr()] = storage.nbytes()
        return t

    x = torch.randn(2, tok // 2, h, dtype=torch.bfloat16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = block(x)
    y.float().sum().backward()
    assert x.grad is not None
    return sum(unique.values()), packed, sum(p.numel() * p.element_size() for p in block.parameters())


def _eager_silu_glu_tensors() -> int:
    rows = yaml.safe_load((ROOT / "stacks" / "pytorch.yaml").read_text())["rows"]
    return rows["activation"]["silu_glu"]["saved"]["f"]


def _routing_bookkeeping(tok: int, k: int, experts: int, weight_bytes: int = 4) -> int:
    """Transformers' routing tensors dse does not count: top-k sum and values (fp32), 3 int64 indices of the T k
    copies, their weights (Mixtral: fp32; Qwen3-MoE casts them to the model's bf16), the int32 expert offsets."""
    return 4 * tok + 4 * tok * k + 24 * tok * k + weight_bytes * tok * k + 4 * experts


CASES = [("mixtral", 512, 256, 512, 8, 2), ("mixtral", 256, 128, 384, 4, 1), ("qwen3", 512, 256, 128, 16, 4)]


@pytest.mark.parametrize("kind, tok, h, f, experts, k", CASES)
def test_an_moe_block_saves_what_dse_counts(kind, tok, h, f, experts, k):
    unique, packed, weights = saved_by_torch(kind, tok, h, f, experts, k)
    terms = AO.moe_mlp_saved_terms(tok, 1, h, experts, k, f, ffn_type="swiglu")
    assert terms["expert_activation"] == 3 * 2 * tok * k * f                   # Megatron's fused SwiGLU: 3 tensors
    eager = sum(terms.values()) + (_eager_silu_glu_tensors() - 3) * 2 * tok * k * f
    assert unique == eager + _routing_bookkeeping(tok, k, experts, 4 if kind == "mixtral" else 2)
    assert packed == unique + weights + 4 * experts                            # the offsets: saved by both GEMMs


def test_the_bookkeeping_dse_leaves_out_is_small_at_mixtrals_size():
    tok, h, f, experts, k = 4096, 4096, 14336, 8, 2
    counted = sum(AO.moe_mlp_saved_terms(tok, 1, h, experts, k, f).values())
    assert _routing_bookkeeping(tok, k, experts) / counted < 0.003
