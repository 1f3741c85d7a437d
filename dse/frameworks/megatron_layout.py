"""Megatron-LM's pipeline stage layout arguments <-> ``plan.pipeline_layout`` (part of
:mod:`dse.frameworks.megatron`; the grammar and Megatron's checks: :mod:`dse.specs.pipeline_layout`).

Read: ``--pipeline-model-parallel-layout`` (the layout string; its stages / pp model chunks set the interleaved
schedule's virtual stages, as Megatron-Core detects them), or the uneven-split flags
``--decoder-first-pipeline-num-layers``, ``--decoder-last-pipeline-num-layers``,
``--account-for-embedding-in-pipeline-split``, ``--account-for-loss-in-pipeline-split``, turned into the same layout
once the model's layers are known (:func:`resolve`). Written: ``--pipeline-model-parallel-layout`` of the plan's
layout (:func:`layout_args`; the uneven-split flags are written as the layout they give).
"""

from __future__ import annotations

import shlex
from typing import Any

from dse.frameworks.common import Imported, bad
from dse.specs.pipeline_layout import LayoutError, expand, from_megatron_flags

LAYOUT = "--pipeline-model-parallel-layout"
FIRST, LAST = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"
EMBEDDING, LOSS = "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"
OPTIONS = {LAYOUT: "str", FIRST: "int", LAST: "int", EMBEDDING: "flag", LOSS: "flag"}


def read(imp: Imported, get) -> None:
    """The layout string into the plan (with its virtual stages), or the uneven-split flags kept for
    :func:`resolve`."""
    text = get(LAYOUT)
    split = {k: get(k) for k in (FIRST, LAST, EMBEDDING, LOSS) if get(k) is not None}
    if text is not None and split:
        raise bad(imp.source, LAYOUT, f"cannot be set with {', '.join(split)} (Megatron refuses the combination)")
    if text is None:
        imp.pipeline_split = split
        return
    try:
        stages = len(expand(text))
    except LayoutError as e:
        raise bad(imp.source, LAYOUT, str(e)) from None
    imp.set("pipeline_layout", text, LAYOUT)
    pp = get("--pipeline-model-parallel-size", 1)
    if stages % pp == 0 and stages // pp > 1 and "virtual_stages" not in imp.plan:
        imp.set("schedule", "interleaved", LAYOUT)
        imp.set("virtual_stages", stages // pp, LAYOUT)


def resolve(imp: Imported, model: Any, data: dict) -> None:
    """The uneven-split flags as a layout of the model's layers (``data``: the plan fields), as Megatron-Core's
    ``get_num_layers_to_build`` places them; a split Megatron refuses names its flag."""
    split = imp.pipeline_split
    if not split:
        return
    key = next(iter(split))
    try:
        data["pipeline_layout"] = from_megatron_flags(model.layers, data.get("pp", 1), data.get("virtual_stages", 1),
                                                      model.mtp_layers or 0, split.get(FIRST), split.get(LAST),
                                                      bool(split.get(EMBEDDING)), bool(split.get(LOSS)))
    except LayoutError as e:
        raise bad(imp.source, key, str(e)) from None
    imp.keys["pipeline_layout"] = " ".join(split)
    imp.plan["pipeline_layout"] = data["pipeline_layout"]


def layout_args(plan: Any) -> str:
    """``--pipeline-model-parallel-layout '...'`` of a plan with a custom layout ('' without one)."""
    text = getattr(plan, "pipeline_layout", None)
    return f"{LAYOUT} {shlex.quote(text)}" if text else ""
