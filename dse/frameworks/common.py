"""What the three framework readers and writers share: the imported config, value checks, the catalog map.

A reader (:mod:`~dse.frameworks.megatron`, :mod:`~dse.frameworks.deepspeed`, :mod:`~dse.frameworks.torchtitan`)
turns a framework's configuration into an :class:`Imported`: the dse plan fields it sets (``dse/specs/plan.py``),
the model when the config defines one, and, by name, every setting it read but does not model and every
setting it does not know (``ignored``). Bad input raises :class:`~dse.errors.InputError` naming the file (or
"megatron arguments") and the key. :func:`dse.frameworks.apply.apply` then merges it with the explicit
``dse`` flags (they win) and resolves the plan.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dse.errors import InputError

# torchtitan's model name and flavor -> the catalog model with the same architecture
# (torchtitan/models/llama3/__init__.py ``llama3_configs``: 8B dim 4096, 32 layers, 32 heads, 8 kv heads,
# ffn_dim_multiplier 1.3, multiple_of 1024 -> 14336, vocabulary 128256 from the Llama 3 tokenizer; 70B and
# 405B likewise; the older llama2 flavors of torchtitan/models/llama/__init__.py).
TORCHTITAN_MODELS = {
    ("llama3", "8B"): "llama3-8b",
    ("llama3", "70B"): "llama3-70b",
    ("llama3", "405B"): "llama3.1-405b",
    ("llama2", "7B"): "llama2-7b",
    ("llama2", "13B"): "llama2-13b",
    ("llama2", "70B"): "llama2-70b",
}


@dataclass
class Imported:
    """A framework configuration read into dse's terms (see the module docstring)."""

    framework: str
    source: str                                    # the file, or "megatron arguments"
    plan: dict[str, Any] = field(default_factory=dict)   # plan fields the config sets
    keys: dict[str, str] = field(default_factory=dict)   # plan field -> the config key it came from
    model: Any = None                              # a ModelSpec, a catalog name, or None (not in the config)
    model_keys: list[str] = field(default_factory=list)  # the config keys that define the model
    world_size: int | None = None                  # GPUs of the job, when the config states them
    world_key: str = ""                            # where the world size came from
    accumulation: int | None = None                # micro-batches per replica per iteration, when the config
    #                                                gives no global batch (global = micro x this x dp)
    context_parallel: int = 1                      # GPUs per replica beyond tp x pp: the plan's cp
    layers_per_virtual_stage: int | None = None    # interleaved schedule: virtual_stages = layers / (pp x this)
    pipeline_split: dict[str, Any] = field(default_factory=dict)   # Megatron's uneven-split flags: a layout once
    #                                              the model's layers are known (dse.frameworks.megatron_layout)
    ignored: list[str] = field(default_factory=list)     # read but not modelled, or unknown: by name
    notes: list[str] = field(default_factory=list)       # assumptions and approximations, one sentence each
    expect: dict[str, tuple[Any, str]] = field(default_factory=dict)   # model field -> (value, key) the --model
    #                                              estimated must have (the config names it but defines no model)
    model_set: dict[str, tuple[Any, str]] = field(default_factory=dict)   # model field -> (value, key) the config
    #                                              sets on the --model estimated (a training choice: MTP depths)

    def set(self, name: str, value: Any, key: str) -> None:
        """Set plan field ``name`` from config key ``key``."""
        self.plan[name] = value
        self.keys[name] = key

    def ignore(self, key: str, why: str = "") -> None:
        """Name a setting that is read but not modelled (``why``: what it does that dse leaves out)."""
        entry = f"{key} ({why})" if why else key
        if entry not in self.ignored:
            self.ignored.append(entry)


def bad(source: str, key: str, message: str) -> InputError:
    """The one-line error of a bad value: the file (or argument list), the key, what was expected."""
    return InputError(f"{source}: {key}: {message}")


def as_int(source: str, key: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an integer of at least ``minimum`` (JSON/TOML integers, or strings of digits)."""
    if isinstance(value, bool):
        raise bad(source, key, f"expected an integer >= {minimum}, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise bad(source, key, f"expected an integer >= {minimum}, got {value!r}") from None
    if not isinstance(value, int) or value < minimum:
        raise bad(source, key, f"expected an integer >= {minimum}, got {value!r}")
    return value


def as_float(source: str, key: str, value: Any, low: float = 0.0, high: float | None = None) -> float:
    """``value`` as a number in [low, high]."""
    try:
        x = float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        x = None
    if x is None or x != x or x < low or (high is not None and x > high):
        upper = f" and <= {high}" if high is not None else ""
        raise bad(source, key, f"expected a number >= {low}{upper}, got {value!r}")
    return x


def as_bool(source: str, key: str, value: Any) -> bool:
    """A JSON/TOML boolean (``true``/``false``)."""
    if not isinstance(value, bool):
        raise bad(source, key, f"expected true or false, got {value!r}")
    return value


def as_choice(source: str, key: str, value: Any, choices) -> str:
    """One of ``choices`` (compared as given)."""
    if value not in choices:
        raise bad(source, key, f"expected one of {', '.join(map(str, choices))}, got {value!r}")
    return value


def read_tree(path: str, what: str, language: str, parse) -> Tree:
    """A JSON/TOML file as a :class:`Tree`; ``parse`` turns its bytes into a dict (one-line errors for an
    unreadable file, text that does not parse, or a document that is not a table of settings)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    try:
        data = parse(raw)
    except ValueError as exc:         # JSONDecodeError, TOMLDecodeError and UnicodeDecodeError are ValueErrors
        raise InputError(f"{path}: not valid {language} ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a {language} object of {what} settings")
    return Tree(data, path)


class Tree:
    """A parsed JSON/TOML document that records which keys were read; the rest are its unknown settings."""

    def __init__(self, data: dict, source: str):
        self.data, self.source, self.read = data, source, set()

    def get(self, path: str, default: Any = None) -> Any:
        """The value at dotted ``path`` (marked read), or ``default`` when absent."""
        node: Any = self.data
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        self.read.add(path)
        return node

    def section(self, path: str) -> dict:
        """The table at ``path`` ({} when absent); a value that is not a table is an error."""
        node = self.get(path, {})
        self.read.discard(path)      # its keys are read one by one
        if not isinstance(node, dict):
            raise bad(self.source, path, f"expected a table/object, got {node!r}")
        return node

    def leaves(self, node: Any = None, prefix: str = "") -> Iterator[str]:
        node = self.data if node is None else node
        for k, v in node.items():
            path = f"{prefix}{k}"
            if isinstance(v, dict) and v:
                yield from self.leaves(v, path + ".")
            else:
                yield path

    def unread(self) -> list[str]:
        """Leaves that no reader asked for (below a read key counts as read)."""
        return [p for p in self.leaves()
                if p not in self.read and not any(p.startswith(r + ".") for r in self.read)]


def gpu_layout(world: int, gpus_per_node: int) -> tuple[int, int]:
    """``(nodes, gpus per node)`` for a launcher that starts the same number of processes on every node:
    the largest divisor of ``world`` that fits a node, and the nodes it takes."""
    per = max(d for d in range(1, min(world, gpus_per_node) + 1) if world % d == 0)
    return world // per, per


def plan_limits(plan, framework: str) -> list[str]:
    """What no stock framework launch expresses for this plan (dse's research techniques): one sentence each."""
    out = []
    if plan.offload_optimizer == "csd":
        out.append("the near-storage optimizer update (offload_optimizer csd, Smart-Infinity) runs on a "
                   "computational-storage fork of DeepSpeed; stock " + framework + " cannot express it")
    if plan.gradient_compression < 1:
        out.append(f"gradient compression {plan.gradient_compression:g} (Smart-Infinity SmartComp) is not "
                   f"expressible in {framework}")
    if plan.offload_activations != "none":
        what = "SSDTrain's activation offload to SSDs" if plan.offload_activations == "ssd" else \
            "activation offload to host memory"
        out.append(f"{what} (offload_activations {plan.offload_activations}) is not a {framework} setting")
    if plan.ssds is not None:
        out.append(f"ssds {plan.ssds}: the drives used are set by the file system (nvme_path), not by {framework}")
    if plan.cp > 1 and plan.cp_comm == "a2a" and framework != "Megatron-LM":
        out.append(f"Ulysses context parallelism (cp {plan.cp}, cp_comm a2a) is not a {framework} setting (DeepSpeed "
                   "wraps the attention in deepspeed.sequence.layer.DistributedAttention in the model code; "
                   "torchtitan's context parallelism is a ring)")
    elif plan.cp > 1 and plan.cp_comm in ("a2a+p2p", "allgather") and framework != "Megatron-LM":
        out.append(f"context parallelism cp_comm {plan.cp_comm} (Transformer Engine's cp_comm_type) is not a "
                   f"{framework} setting; the config written runs "
                   + ("a ring (torchtitan's context parallelism)" if framework == "torchtitan" else "no cp"))
    elif plan.cp > 1 and framework not in ("Megatron-LM", "torchtitan"):
        out.append(f"context parallelism (cp {plan.cp}, ring attention) is not a {framework} setting (DeepSpeed's "
                   "Ulysses sequence parallelism is another scheme, all-to-all over the heads: plan.cp_comm a2a)")
    if plan.finetune != "full":
        quant = f", the frozen weights in {plan.quantization} (bitsandbytes)" if plan.finetune == "qlora" else ""
        out.append(f"finetune {plan.finetune} (LoRA rank {plan.lora_rank} on {plan.lora_targets} linears{quant}) is "
                   f"not a {framework} setting: the training script adds the adapters (e.g. Hugging Face PEFT "
                   "LoraConfig); the config written trains every weight")
    if plan.precision == "fp8" and framework == "DeepSpeed":
        out.append("precision fp8 is not a ds_config.json setting: FP8 GEMMs come from Transformer Engine in the "
                   "model code (te.fp8_autocast); the config written is bf16")
    return out
