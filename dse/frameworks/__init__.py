"""Framework configurations in and out: Megatron-LM arguments, DeepSpeed's ds_config.json, torchtitan's TOML.

In: ``dse estimate --from megatron "ARGS"`` (or a launch script), ``--from deepspeed ds_config.json``,
``--from torchtitan job.toml`` read the framework's parallelism, batch, precision, recompute, ZeRO and
offload settings onto a plan (:mod:`dse.frameworks.apply`); every setting read but not modelled, and every
unknown one, is named in the report's ``ignored`` list. Out: ``--emit megatron|deepspeed|torchtitan`` writes
the launch arguments, ds_config.json or TOML of a plan (:mod:`dse.frameworks.emit`); what the framework
cannot express is stated as a comment or warning. One module per framework holds both directions and cites
the framework source its option names come from; docs/frameworks.md has the mapping tables.

Imported only when ``--from`` or ``--emit`` is given (``dse estimate`` starts without it).
"""

FRAMEWORKS = ("megatron", "deepspeed", "torchtitan")
