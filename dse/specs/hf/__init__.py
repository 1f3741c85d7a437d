"""Read a Hugging Face ``config.json`` into model-spec fields, offline.

No network and no ``transformers`` package: the field names of each supported
``model_type`` are mapped by hand, following the configuration classes'
documented defaults (GPT2Config, LlamaConfig, MistralConfig, Qwen2Config,
OPTConfig, BertConfig, MixtralConfig, Qwen2MoeConfig, Qwen3Config, Qwen3MoeConfig, Gemma2Config, Gemma3TextConfig,
GptOssConfig, Llama4TextConfig, DeepseekV2Config, DeepseekV3Config, Phi3Config, GPTNeoXConfig, FalconConfig,
T5Config, GemmaConfig, Starcoder2Config, StableLmConfig, GraniteConfig, SmolLM3Config, Olmo2Config, PhiConfig,
GPTBigCodeConfig, GPTJConfig, BloomConfig, OlmoConfig, OlmoeConfig, GraniteMoeConfig, PhimoeConfig,
Glm4MoeConfig, NemotronConfig, CohereConfig, Cohere2Config, GPTNeoConfig).
How each family's modules are written where it changes an eager stack's kernels
(``qkv_projection``, ``softmax_dtype``) follows the modeling files of Transformers 5.24: GPT-2's fused
``c_attn``, the separate ``q_proj``/``k_proj``/``v_proj`` (``query``/``key``/``value``) of the others, and the
``softmax(..., dtype=torch.float32)`` of the Llama, Mistral, Qwen2 and OPT eager attention.

One module per family (``classic``, ``llama_like``, ...): a reader is ``read(cfg, model_type, where, name, g) ->
fields``, registered in :data:`READERS`; what all share (refused keys, activation names, generic warnings) is in
:mod:`dse.specs.hf.common`.
"""

from __future__ import annotations

from collections.abc import Callable

from dse.errors import InputError
from dse.specs.hf import (
    bloom,
    classic,
    cohere,
    decoders,
    deepseek,
    falcon,
    gemma3,
    gpt_neo,
    gpt_neox,
    gpt_oss,
    llama4,
    llama_like,
    moe_decoders,
    nemotron,
    phi,
    phi3,
    t5,
)
from dse.specs.hf.common import MOE_KEYS, UNMODELLED, Get, get, notes, refuse_unmodelled
from dse.specs.hf.config_types import check_types

__all__ = ["MOE_KEYS", "READERS", "SUPPORTED", "UNMODELLED", "from_hf_config"]

#: model_type -> its reader.
READERS: dict[str, Callable[[dict, str, str, str, Get], dict]] = {
    "gpt2": classic.gpt2, "opt": classic.opt, "bert": classic.bert, "gpt_bigcode": classic.gpt_bigcode,
    **dict.fromkeys(llama_like.TYPES, llama_like.read),
    **dict.fromkeys(gemma3.TYPES, gemma3.read), **dict.fromkeys(gpt_oss.TYPES, gpt_oss.read),
    **dict.fromkeys(llama4.TYPES, llama4.read),
    **dict.fromkeys(deepseek.TYPES, deepseek.read),
    **dict.fromkeys(phi3.TYPES, phi3.read), **dict.fromkeys(gpt_neox.TYPES, gpt_neox.read),
    **dict.fromkeys(gpt_neo.TYPES, gpt_neo.read),
    **dict.fromkeys(falcon.TYPES, falcon.read), **dict.fromkeys(t5.TYPES, t5.read),
    **dict.fromkeys(decoders.TYPES, decoders.read), **dict.fromkeys(phi.TYPES, phi.read),
    "gptj": phi.gptj, **dict.fromkeys(bloom.TYPES, bloom.read),
    **dict.fromkeys(moe_decoders.TYPES, moe_decoders.read), **dict.fromkeys(nemotron.TYPES, nemotron.read),
    **dict.fromkeys(cohere.TYPES, cohere.read),
}
SUPPORTED = tuple(READERS)


def from_hf_config(cfg: dict, where: str, default_name: str = "hf-model") -> dict:
    """Model-spec fields (a dict for :func:`dse.specs._schema.build`) from a HF config.

    A key that changes the architecture and is not modelled is an error (:data:`UNMODELLED`) or, where the
    estimate prices it approximately, a note in the spec's ``unmodelled`` (reported as a warning with every
    estimate, see :mod:`dse.estimate.defaults`).
    """
    if not isinstance(cfg, dict):
        raise InputError(f"{where}: expected a JSON object")
    check_types(cfg, where)
    mt = cfg.get("model_type")
    if mt not in READERS:
        raise InputError(f"{where}: unsupported model_type {mt!r}; supported: {', '.join(SUPPORTED)}")
    refuse_unmodelled(cfg, where)
    name = cfg.get("_name_or_path") or default_name
    name = str(name).rstrip("/").split("/")[-1] or default_name
    g = lambda k, d=None, req=False: get(cfg, k, where, d, req)  # noqa: E731
    fields = READERS[mt](cfg, mt, where, name, g)
    found = notes(cfg, mt)
    if found:
        fields["unmodelled"] = [f"{where}: {n}" for n in found]
    return fields
