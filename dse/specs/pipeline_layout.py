"""Custom pipeline stage layouts, as Megatron-LM writes and checks them (``plan.pipeline_layout``, ``--pp-layout``).

The layout string of Megatron-Core's ``--pipeline-model-parallel-layout``
(``megatron/core/transformer/pipeline_parallel_layer_layout.py``, ``PipelineParallelLayerLayout``): stages separated
by ``|``, one character per layer: ``E`` the embedding, ``t`` a transformer (decoder) layer, ``m`` a multi-token
prediction depth, ``L`` the loss (final norm, output head and cross-entropy). ``,`` is cosmetic; ``(...)*n`` repeats
a group and ``x*n`` a character, unrolled in that order with Megatron's two regular expressions (no nesting of
parentheses). ``pp x v`` stages: stage ``j`` is model chunk ``j // pp`` of pipeline rank ``j % pp``, and the layers
are numbered in the string's order. Example (Megatron-Bridge's DeepSeek-V3 recipe, pp 16):
``"Et*4|(t*4|)*14tmL"``.

The older flags are read into the same layout (:func:`from_megatron_flags`): ``--decoder-first-pipeline-num-layers``
/ ``--decoder-last-pipeline-num-layers`` (uneven first / last stage, the other layers split evenly over the middle
ranks) and ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split`` (the embedding
/ the loss counts as one layer of the even split), as ``transformer_block.get_num_layers_to_build`` places them.
Pure Python on scalars; the estimate prices it per stage (:mod:`dse.estimate.stages`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

FLAG = "--pp-layout"
SYMBOLS = "EtmL"
#: Megatron's two unrolling patterns, applied in order: ``(group)*n``, then ``x*n``
_PATTERNS = (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)")


class LayoutError(ValueError):
    """A layout string Megatron refuses; the message names the problem (the rule adds the flag)."""


class Stage(NamedTuple):
    """What one pipeline rank holds, summed over its model chunks: the embedding (0/1), the ids of its transformer
    layers (numbered in the layout's order), its MTP depths and the loss (0/1)."""

    embedding: int
    layers: tuple[int, ...]
    mtp: int
    loss: int


def expand(text: str) -> list[str]:
    """The layout's stages as strings of ``E t m L`` (Megatron's ``parse_str_to_list``, exactly)."""
    s = text.replace(",", "")
    for pattern in _PATTERNS:
        s = re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), s)
    stages = s.split("|")
    for stage in stages:
        bad = [c for c in stage if c not in SYMBOLS]
        if bad:
            raise LayoutError(f"invalid layer character {bad[0]!r} in stage {stage!r}; known: E (embedding), "
                              "t (transformer layer), m (MTP depth), L (loss), | , ( )*n x*n")
    return stages


def check(stages: list[str], pp: int, layers: int, mtp: int) -> int:
    """Megatron's checks of a layout (``__init__`` and ``validate_layer_layout``); returns the virtual stages v."""
    if len(stages) % pp:
        raise LayoutError(f"{len(stages)} stages are not a multiple of --pp {pp}")
    v = len(stages) // pp
    flat = "".join(stages)
    if not flat or flat[0] != "E" or flat[-1] != "L":
        raise LayoutError("the first layer must be the embedding E and the last the loss L")
    if flat.count("E") != 1 or flat.count("L") != 1:
        raise LayoutError("the embedding E and the loss L must each appear exactly once")
    if flat.count("t") != layers:
        raise LayoutError(f"{flat.count('t')} transformer layers t, the model has {layers}")
    if flat.count("m") != mtp:
        raise LayoutError(f"{flat.count('m')} MTP depths m, the model has mtp_layers {mtp}")
    if "m" in flat and "t" in flat[flat.index("m"):]:
        raise LayoutError("transformer layers t must come before the MTP depths m")
    for j, stage in enumerate(stages):
        if "m" in stage and (j // pp < v - 1 or stage.count("m") != mtp):
            raise LayoutError("all MTP depths must be in one stage, in the last model chunk of its rank")
    return v


@lru_cache(maxsize=256)
def parse(text: str, pp: int, layers: int, mtp: int = 0) -> tuple[tuple[Stage, ...], int]:
    """(per pipeline rank the :class:`Stage` it holds, the virtual stages v) of a layout string; LayoutError if
    Megatron would refuse it."""
    stages = expand(text)
    v = check(stages, pp, layers, mtp)
    first = 0
    ids: list[list[int]] = [[] for _ in range(pp)]
    for j, stage in enumerate(stages):
        n = stage.count("t")
        ids[j % pp].extend(range(first, first + n))
        first += n
    ranks = tuple(Stage(sum(stages[c * pp + r].count("E") for c in range(v)), tuple(ids[r]),
                        sum(stages[c * pp + r].count("m") for c in range(v)),
                        sum(stages[c * pp + r].count("L") for c in range(v))) for r in range(pp))
    return ranks, v


def from_megatron_flags(layers: int, pp: int, v: int, mtp: int, first: int | None = None, last: int | None = None,
                        embedding: bool = False, loss: bool = False) -> str:
    """The layout string of Megatron's uneven-pipeline flags (``transformer_block.get_num_layers_to_build``).

    ``first``/``last``: ``--decoder-first/last-pipeline-num-layers``; the other layers split evenly over the middle
    ranks. ``embedding``/``loss``: ``--account-for-embedding/loss-in-pipeline-split`` (the embedding / the loss takes
    one layer's place on the first / last stage). Each rank's layers split evenly over its v model chunks; the MTP
    depths go with the loss (Megatron's default). LayoutError where Megatron refuses the combination.
    """
    if (first is not None or last is not None) and (embedding or loss):
        raise LayoutError("uneven first/last stages cannot be combined with accounting for the embedding or loss")
    per_rank = [0] * pp
    if first is not None or last is not None:
        rest, middle = layers - (first or 0) - (last or 0), pp - (first is not None) - (last is not None)
        if any(x is not None and x <= 0 for x in (first, last)) or bool(rest) != bool(middle) or \
                (middle and rest % middle) or rest < 0:
            raise LayoutError(f"{layers} layers do not split into first {first}, last {last} and {max(middle, 0)} "
                              "equal middle stages")
        per_rank = [rest // middle if middle else 0] * pp
        per_rank[0] = first if first is not None else per_rank[0]
        per_rank[-1] = last if last is not None else per_rank[-1]
    else:
        total = layers + embedding + loss
        if total % pp:
            raise LayoutError(f"{total} layers (with the embedding/loss counted) do not divide by --pp {pp}")
        per_rank = [total // pp] * pp
    if any(n % v for n in per_rank):
        raise LayoutError(f"layers per rank {per_rank} do not divide by the {v} virtual stages")
    chunks = [[n // v] * v for n in per_rank]
    if embedding:
        chunks[0][0] -= 1
    if loss:
        chunks[-1][-1] -= 1
    if min(min(c) for c in chunks) < 0:
        raise LayoutError("not enough layers in the first or last stage for the embedding or loss")
    stages = ["t" * chunks[j % pp][j // pp] for j in range(pp * v)]
    stages[0] = "E" + stages[0]
    stages[-1] += "m" * mtp + "L"
    return "|".join(stages)


def uniform(layers: int, pp: int, v: int = 1, mtp: int = 0) -> str | None:
    """The layout of Megatron's default even split (layers divisible by pp v), or None where it does not divide."""
    if layers % (pp * v):
        return None
    return from_megatron_flags(layers, pp, v, mtp)
