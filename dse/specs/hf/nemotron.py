"""config.json reader of NVIDIA Nemotron-4 / Minitron (NemotronConfig; Transformers 5.24 modeling_nemotron.py).

NemotronDecoderLayer: Llama's sequential pre-norm layer (x + attn(ln1(x)), then + mlp(ln2(x))) with

- NemotronLayerNorm1P, a LayerNorm with weight and bias whose scale is stored centred on 0: F.layer_norm(x,
  self.weight + 1.0, self.bias) (``zero_centered_gamma``; Megatron-Core's apply_layernorm_1p);
- NemotronMLP: a two-matrix up_proj/down_proj MLP with ``hidden_act`` relu2, Transformers' ReLUSquaredActivation
  (relu, then torch.square; So et al. 2021, Primer, arXiv 2109.08668; Nemotron-4 15B, arXiv 2402.16819 §2:
  "Squared ReLU activations in the MLP layers"), biases with ``mlp_bias`` (default false);
- separate q_proj/k_proj/v_proj/o_proj with ``attention_bias`` (default false) on all four, grouped K/V heads,
  ``head_dim`` (default h / heads);
- rotary positions on ``partial_rotary_factor`` of each head (NemotronConfig's default 0.5), the rotated and passed
  parts concatenated back (torch.cat), as GPT-NeoX;
- a final LayerNorm1P and an lm_head untied by default (``tie_word_embeddings`` false); the eager softmax in fp32.
"""

from __future__ import annotations

from dse.specs.hf.common import Get, dropout_fields, expect, llama_shape, rotary_fraction

TYPES = ("nemotron",)


def read(cfg: dict, mt: str, where: str, name: str, g: Get) -> dict:
    """NemotronForCausalLM's fields; the defaults are NemotronConfig's (the nemotron-15b style configuration)."""
    expect(g, "hidden_act", "relu2", where, mt)
    attn_bias = bool(g("attention_bias", False))
    return dict(
        name=name, **llama_shape(g, layers=32, hidden=6144, heads=48, ffn=24576, vocab=256000, max_pos=4096),
        ffn_type="relu2", norm="layernorm", zero_centered_gamma=True, bias=attn_bias, qkv_bias=attn_bias,
        mlp_bias=bool(g("mlp_bias", False)), position="rotary",
        rotary_fraction=rotary_fraction(cfg, where, 0.5), tied_embeddings=bool(g("tie_word_embeddings", False)),
        qkv_projection="separate", softmax_dtype="fp32", **dropout_fields(g("attention_dropout", 0.0)),
        source=f"Hugging Face config {where}",
    )
