"""The plan rules of an encoder-decoder model (T5: docs/encoder-decoder.md), part of :data:`dse.specs.rules.
MODEL_RULES`: pipeline and context parallelism are not modelled for two stacks; ``target_len`` needs a decoder
stack over an encoder's output."""

from __future__ import annotations

from dse.specs.rule import Rule

ENCODER_DECODER_RULES = (
    Rule("encoder-decoder with pp or cp > 1 is not modelled", ("pp", "cp", "model.architecture"),
         when=lambda p, m, s: m.architecture == "encoder-decoder", ok=lambda p, m, s: (p.pp == 1) & (p.cp == 1),
         message=lambda p, m, s: f"{m.name} is an encoder-decoder model: --pp {p.pp} / --cp {p.cp} are not modelled "
                                 "(the two stacks' stage split and split sequences); allowed: --pp 1 --cp 1"),
    Rule("target_len needs an encoder-decoder model", ("target_len", "model.architecture"),
         when=lambda p, m, s: m.architecture != "encoder-decoder", ok=lambda p, m, s: p.target_len is None,
         message=lambda p, m, s: f"target_len {p.target_len}: {m.name} has no decoder stack over an encoder's output "
                                 "(target_len is for encoder-decoder models; set seq_len)"),
)
