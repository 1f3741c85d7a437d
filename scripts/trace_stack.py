"""Record what eager PyTorch (Hugging Face Transformers) runs and saves for one GPT-2 or Llama layer: the provenance
of stacks/pytorch.yaml and the fixtures tests/fixtures/pytorch_stack_trace.json and pytorch_stack_trace_llama.json.

Builds Transformers' GPT2LMHeadModel or LlamaForCausalLM (dimensions: DIMS) from a config (no download; bf16
weights, dropout 0, training mode) with one or two layers, runs one forward (with labels: the loss) and backward
pass on the CPU, and records

- every non-view aten op of each pass (TorchDispatchMode) with the bytes of its tensor inputs and outputs, and
- every tensor saved for backward (torch.autograd.graph.saved_tensors_hooks), deduplicated by storage,
  parameters excluded (``saved_bytes``: what stays alive on the device), and
- every pack call of those hooks at the packed tensor's own size, without deduplication (``packed_bytes``, and
  ``packed_param_bytes`` for the parameters): what ``torch.autograd.graph.save_on_cpu`` copies to the host.

A layer's numbers are the difference between the two-layer and the one-layer model (the embedding and the head
cancel). The CPU runs the same modules and autograd formulas as CUDA; kernels that only CUDA launches (a second
LayerNorm-backward kernel, cuDNN attention's own buffers) are not in the trace and are stated in the stack file.

Usage (needs torch and transformers, which dse itself does not):
    python scripts/trace_stack.py > tests/fixtures/pytorch_stack_trace.json
    python scripts/trace_stack.py llama > tests/fixtures/pytorch_stack_trace_llama.json
    python scripts/trace_stack.py gemma3 > tests/fixtures/pytorch_stack_trace_gemma3.json   (also: opt, gpt_neox, and
    the AUTO families: gemma, phi, starcoder2, granite, olmo2, gpt_bigcode, gptj, bloom, olmo, olmoe, phimoe,
    glm4_moe, nemotron, cohere, phi3, gpt_neo)
"""

from __future__ import annotations

import json
import sys

DIMS = {
    "gpt2": {"h": 320, "heads": 5, "b": 3, "s": 96, "vocab": 50257},
    # grouped-query attention (2 K/V heads for 4 query heads), SwiGLU, RMSNorm, rotary positions, untied head
    "llama": {"h": 256, "heads": 4, "kv_heads": 2, "ffn": 704, "b": 3, "s": 96, "vocab": 32000},
    # pre-LN OPT: LayerNorm, ReLU MLP, separate q/k/v projections (q scaled before the attention), learned positions
    "opt": {"h": 320, "heads": 5, "ffn": 1280, "b": 3, "s": 96, "vocab": 50272},
    # Gemma 3: four RMSNorms with the (1 + w) scale in fp32, QK-norm, GeGLU, one K/V head, sqrt(h) embedding scale
    # GPT-NeoX (Pythia): fused QKV interleaved per head, partial rotary (rotary_pct 0.25), parallel residual, exact
    # GeLU, LayerNorm, untied embed_out head
    "gpt_neox": {"h": 256, "heads": 4, "ffn": 1024, "rotary_pct": 0.25, "b": 3, "s": 96, "vocab": 50304},
    "gemma3": {"h": 256, "heads": 4, "kv_heads": 1, "head_dim": 64, "ffn": 704, "b": 3, "s": 96, "vocab": 32000},
}
#: The families built through AutoConfig.for_model(model_type, **config) (the config's own field names), dropout 0.
#: gemma: GeGLU, (1 + w) RMSNorms in fp32, sqrt(h) embedding scale, one K/V head; phi: parallel attention and MLP
#: after one LayerNorm, partial rotary 0.4, biases, an lm_head bias; starcoder2: LayerNorm, biased GELU MLP, 2 K/V
#: heads; granite: Llama with the embedding, residual and logit multipliers; olmo2: post-branch RMSNorms and a QK-norm
#: over the whole projections; gpt_bigcode: GPT-2's block with multi-query attention (one K/V head in a fused c_attn);
#: gptj: Phi's parallel block without attention biases, rotary on 32 of 64 dimensions before the heads' transpose;
#: bloom: ALiBi eager attention only (baddbmm over the alibi bias; Transformers 5.24 runs it for sdpa too), its
#: autograd GeLU, an embedding LayerNorm, a fused per-head [q k v] query_key_value, biases, a tied head; olmo: Llama's
#: layer with OlmoLayerNorm (LayerNorm without weight or bias, in fp32 and cast back)
AUTO = {
    "gemma": {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
              "intermediate_size": 704, "vocab_size": 32000},
    "phi": {"hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024, "vocab_size": 32000,
            "partial_rotary_factor": 0.5, "resid_pdrop": 0.0, "embd_pdrop": 0.0},
    "starcoder2": {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 1024,
                   "vocab_size": 32000, "residual_dropout": 0.0, "embedding_dropout": 0.0},
    "granite": {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 704,
                "vocab_size": 32000, "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
                "logits_scaling": 8.0, "attention_multiplier": 0.015625},
    "olmo2": {"hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 704, "vocab_size": 32000},
    "gpt_bigcode": {"n_embd": 256, "n_head": 4, "n_inner": 1024, "vocab_size": 32000, "multi_query": True,
                    "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "n_positions": 1024},
    "gptj": {"n_embd": 256, "n_head": 4, "n_inner": 1024, "rotary_dim": 32, "vocab_size": 32000, "resid_pdrop": 0.0,
             "embd_pdrop": 0.0, "attn_pdrop": 0.0, "n_positions": 1024},
    "bloom": {"hidden_size": 256, "n_head": 4, "vocab_size": 32000, "hidden_dropout": 0.0},
    "olmo": {"hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 704, "vocab_size": 32000},
    # the MoE families' attention under a dense MLP (their routed experts are priced by the MoE rows, not traced
    # here): olmoe: Llama's layer with a QK-norm over the whole projections (LlamaRMSNorm), every layer's
    # OlmoeSparseMoeBlock swapped for Transformers' own OlmoeMLP (DENSE_MLP); glm4_moe: q/k/v biases, a per-head
    # QK-norm and rotary on half of each head, every layer a first_k_dense_replace dense layer (Glm4MoeMLP)
    "olmoe": {"hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 704, "vocab_size": 32000},
    # phimoe: LayerNorms, biases on q, k, v and o, an lm_head bias; its experts swapped for MistralMLP (DENSE_MLP: a
    # SwiGLU MLP without biases, as its experts are)
    "phimoe": {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 704,
               "vocab_size": 32000, "attention_bias": True, "lm_head_bias": True, "input_jitter_noise": 0.0},
    "glm4_moe": {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                 "intermediate_size": 704, "vocab_size": 32000, "attention_bias": True, "use_qk_norm": True,
                 "partial_rotary_factor": 0.5, "first_k_dense_replace": 8, "num_nextn_predict_layers": 0},
    # nemotron: LayerNorm1P (F.layer_norm with weight + 1), a squared-ReLU MLP up/down without biases, rotary on half
    # of each head, 2 K/V heads, an untied head
    "nemotron": {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                 "intermediate_size": 1024, "vocab_size": 32000, "partial_rotary_factor": 0.5},
    # cohere (Command-R): one CohereLayerNorm (weight only, in fp32 as separate ops) feeding attention and a SwiGLU
    # MLP side by side, the rotary products in fp32 on interleaved pairs, 2 K/V heads, the logits times logit_scale,
    # a tied head
    "cohere": {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 704,
               "vocab_size": 32000},
    # phi3 (Phi-3): Llama's layer with Q, K, V sliced out of one qkv_proj, gate and up chunked out of one gate_up_proj,
    # the rotary's q_rot / q_pass slices and cat; 2 K/V heads (token ids 0: its default pad id is past this vocabulary)
    "phi3": {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 704,
             "vocab_size": 32000, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "pad_token_id": 0, "bos_token_id": 0,
             "eos_token_id": 0},
    # gpt_neo (GPT-Neo): GPT-2's block with separate q_proj, k_proj, v_proj without biases (out_proj with one), q and
    # k cast to fp32 before an unscaled score product, the causal (and, on local layers, the 256-token window) mask
    # applied by torch.where, global and local layers alternating (attention_types: set per layer count in build)
    "gpt_neo": {"hidden_size": 256, "num_heads": 4, "vocab_size": 32000, "resid_dropout": 0.0, "embed_dropout": 0.0,
                "bos_token_id": 0, "eos_token_id": 0},
}
#: families whose MoE block is replaced by a dense MLP class after the build: "model_type:Class" of
#: transformers.models.<model_type>.modeling_<model_type> (the layer attribute: block_sparse_moe or mlp)
DENSE_MLP = {"olmoe": "olmoe:OlmoeMLP", "phimoe": "mistral:MistralMLP"}
#: families whose Transformers model refuses SDPA (BloomForCausalLM: "does not support an attention implementation
#: through torch.nn.functional.scaled_dot_product_attention"): traced eager only
EAGER_ONLY = ("bloom", "gpt_neo")   # GPTNeoPreTrainedModel: eager or flash_attention_2, no SDPA
for _arch, _cfg in AUTO.items():
    _kv = _cfg.get("num_key_value_heads", 1 if _cfg.get("multi_query") else 4)
    DIMS[_arch] = {"h": 256, "heads": 4, "kv_heads": _kv, "b": 3, "s": 96, "vocab": 32000, "config": _cfg}


def build(arch: str, layers: int, attn: str, dims: dict):
    """Transformers' GPT2LMHeadModel, OPTForCausalLM, LlamaForCausalLM, GPTNeoXForCausalLM or Gemma3ForCausalLM from a
    config: bf16, dropout 0, training."""
    import torch

    torch.manual_seed(0)
    if arch in AUTO:
        from transformers import AutoConfig, AutoModelForCausalLM
        layers_key = ("n_layer" if arch in ("gpt_bigcode", "gptj", "bloom") else "num_layers" if arch == "gpt_neo"
                      else "num_hidden_layers")
        extra = {"attention_types": [[["global", "local"][:layers], 1]]} if arch == "gpt_neo" else {}
        cfg = AutoConfig.for_model(arch, **{**dims["config"], layers_key: layers, "attention_dropout": 0.0,
                                            "max_position_embeddings": 1024, **extra})
        cfg._attn_implementation = attn
        model = AutoModelForCausalLM.from_config(cfg)
        if arch in DENSE_MLP:
            import importlib

            family, cls = DENSE_MLP[arch].split(":")
            mlp = getattr(importlib.import_module(f"transformers.models.{family}.modeling_{family}"), cls)
            for layer in model.model.layers:
                setattr(layer, "block_sparse_moe" if hasattr(layer, "block_sparse_moe") else "mlp", mlp(cfg))
        return model.to(torch.bfloat16).train()
    if arch == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=layers, n_embd=dims["h"], n_head=dims["heads"], vocab_size=dims["vocab"],
                         n_positions=1024, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        cls = GPT2LMHeadModel
    elif arch == "gpt_neox":
        from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
        cfg = GPTNeoXConfig(num_hidden_layers=layers, hidden_size=dims["h"], num_attention_heads=dims["heads"],
                            intermediate_size=dims["ffn"], vocab_size=dims["vocab"], max_position_embeddings=1024,
                            rotary_pct=dims["rotary_pct"], use_parallel_residual=True, hidden_dropout=0.0,
                            attention_dropout=0.0, hidden_act="gelu", tie_word_embeddings=False)
        cls = GPTNeoXForCausalLM
    elif arch == "gemma3":
        from transformers import Gemma3ForCausalLM, Gemma3TextConfig
        cfg = Gemma3TextConfig(num_hidden_layers=layers, hidden_size=dims["h"], num_attention_heads=dims["heads"],
                               num_key_value_heads=dims["kv_heads"], head_dim=dims["head_dim"],
                               intermediate_size=dims["ffn"], vocab_size=dims["vocab"], max_position_embeddings=1024,
                               query_pre_attn_scalar=dims["head_dim"], sliding_window=512, attention_dropout=0.0)
        cls = Gemma3ForCausalLM
    elif arch == "opt":
        from transformers import OPTConfig, OPTForCausalLM
        cfg = OPTConfig(num_hidden_layers=layers, hidden_size=dims["h"], num_attention_heads=dims["heads"],
                        ffn_dim=dims["ffn"], vocab_size=dims["vocab"], max_position_embeddings=1024,
                        word_embed_proj_dim=dims["h"], dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                        layerdrop=0.0)
        cls = OPTForCausalLM
    else:
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(num_hidden_layers=layers, hidden_size=dims["h"], num_attention_heads=dims["heads"],
                          num_key_value_heads=dims["kv_heads"], intermediate_size=dims["ffn"],
                          vocab_size=dims["vocab"], max_position_embeddings=1024, attention_dropout=0.0,
                          tie_word_embeddings=False)
        cls = LlamaForCausalLM
    cfg._attn_implementation = attn
    return cls(cfg).to(torch.bfloat16).train()


VIEWS = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "split", "slice", "select", "unsqueeze",
         "squeeze", "detach", "alias", "as_strided", "_reshape_alias", "split_with_sizes", "lift_fresh"}


def recorder(ops: dict, describe):
    """A TorchDispatchMode that appends [op, describe(inputs), describe(outputs)] of every non-view aten op to
    ``ops[mode.phase]`` (set ``mode.phase = "backward"`` before the backward pass)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        phase = "forward"

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.__name__.split(".")[0]
            if name not in VIEWS:
                ops[self.phase].append([name, describe(args), describe(out)])
            return out

    return Record()


def run(layers: int, attn: str, checkpoint: bool, arch: str = "gpt2") -> dict:
    import torch
    from torch.utils._pytree import tree_leaves

    dims = DIMS[arch]
    b, s, vocab = dims["b"], dims["s"], dims["vocab"]
    model = build(arch, layers, attn, dims)
    if checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids = torch.randint(0, vocab, (b, s))
    ops = {"forward": [], "backward": []}

    def nbytes(x) -> int:
        return sum(t.numel() * t.element_size() for t in tree_leaves(x) if isinstance(t, torch.Tensor))

    saved: dict = {}
    packed: list = []      # every pack call: (bytes at the tensor's own size, storage)

    def pack(t):
        st = t.untyped_storage()
        saved[st.data_ptr()] = st.nbytes()
        packed.append((t.numel() * t.element_size(), st.data_ptr()))
        return t

    mode = recorder(ops, nbytes)
    with mode, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(input_ids=ids, labels=ids).loss
        mode.phase = "backward"
        loss.backward()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    # what save_on_cpu copies: every packed tensor at its own size (no deduplication), parameters apart
    return {"ops": ops, "saved_bytes": sum(v for k, v in saved.items() if k not in params),
            "packed_bytes": sum(n for n, ptr in packed if ptr not in params),
            "packed_param_bytes": sum(n for n, ptr in packed if ptr in params)}


def main() -> None:
    import torch
    import transformers

    arch = sys.argv[1] if len(sys.argv) > 1 else "gpt2"
    if arch not in DIMS:
        sys.exit(f"trace_stack.py: unknown architecture {arch!r}; expected one of {', '.join(DIMS)}")
    dims = DIMS[arch]
    out = {"arch": arch, "torch": torch.__version__, "transformers": transformers.__version__, "dims": dims, "runs": {}}
    for attn in ("eager",) if arch in EAGER_ONLY else ("sdpa", "eager"):
        for ckpt in (False, True):
            key = f"{attn}-{'full' if ckpt else 'none'}"
            out["runs"][key] = {str(n): run(n, attn, ckpt, arch) for n in (1, 2)}
    json.dump(out, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
