"""The plan rules of multi-token prediction (``model.mtp_layers``: docs/mla.md), part of :data:`dse.specs.rules.
MODEL_RULES`: its depths are priced for full training on GPU systems with the activations kept on the GPU."""

from __future__ import annotations

from dse.specs.hardware import GPU_SYSTEM
from dse.specs.rule import Rule


def _mtp_off(p, s) -> str:
    """The first plan choice multi-token prediction is not modelled with ('' if none)."""
    # fine-tuning: Transformers' DeepseekV3 drops the MTP layer on load (``_keys_to_ignore_on_load_unexpected``
    # ``model.layers.61``), so PEFT trains no MTP depth: not a combination a framework runs; activation offload:
    # not modelled (SSDTrain's per-tensor count is the decoder layer's, the depths' own tensors are not priced)
    # eager stacks: Transformers' DeepseekV3 and Glm4Moe build no MTP module (the config's num_nextn_predict_layers is
    # read by Megatron-Core and vLLM, not by the modeling code), so a Transformers run trains no depth
    off = [f"--stack {p.stack}"] * (getattr(p, "stack", "megatron") != "megatron")
    off += [f"--finetune {p.finetune}"] * (p.finetune != "full")
    off += [f"--offload-activations {p.offload_activations}"] * (p.offload_activations != "none")
    return (off + ["a chiplet package"] * (s is not None and s.kind != GPU_SYSTEM) + [""])[0]


MTP_RULES = (
    Rule("multi-token prediction beyond what is modelled", ("stack", "finetune", "offload_activations",
                                                                      "hardware.kind"),
         when=lambda p, m, s: bool(m.mtp_layers), ok=lambda p, m, s: not _mtp_off(p, s),
         message=lambda p, m, s: f"{_mtp_off(p, s)} is not modelled with multi-token prediction (model {m.name}, "
                                 f"mtp_layers {m.mtp_layers}"
                                 + (": Transformers builds no MTP module, so an eager run trains no depth")
                                 * (getattr(p, "stack", "megatron") != "megatron")
                                 + (": Transformers' DeepseekV3 drops the MTP layer on load, so PEFT fine-tunes no "
                                    "MTP depth") * (getattr(p, "stack", "megatron") == "megatron"
                                                    and p.finetune != "full")
                                 + "); allowed: --stack megatron, --finetune full, no activation offload, a GPU "
                                   "system, or --set model.mtp_layers=0 (docs/mla.md)"),
)
