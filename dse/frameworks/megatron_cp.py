"""Megatron-LM's context-parallel communication both ways: ``--cp-comm-type`` and
``--hierarchical-context-parallel-sizes`` (``megatron/training/arguments.py``; the types are Transformer Engine's
``cp_comm_type``: docs/long-context.md)."""

from __future__ import annotations

from typing import Any

from dse.frameworks.common import Imported, as_choice, as_int, bad

_KINDS = {"p2p": "p2p", "a2a": "a2a", "a2a+p2p": "a2a+p2p", "allgather": "allgather", "all_gather": "allgather"}
_HCP = "--hierarchical-context-parallel-sizes"


def read(imp: Imported, get: Any, cp: int) -> None:
    """``--cp-comm-type`` (default p2p) into ``plan.cp_comm``: one type for every layer is that type (Megatron's
    help spells all-gather ``allgather``, TE's ``all_gather``: both read); a2a+p2p takes its levels from
    ``--hierarchical-context-parallel-sizes A R`` (required, two values, A R = cp: Megatron asserts the product, TE
    ``attn_forward_func_with_cp`` the two levels, ``len(cp_group) == 2``; three or more sizes are refused) into
    ``plan.cp_a2a``; a per-layer list mixing types is estimated as p2p (listed as ignored)."""
    kinds = get("--cp-comm-type")
    sizes = get(_HCP)
    if kinds is not None:
        kinds = [_KINDS[as_choice(imp.source, "--cp-comm-type", k, tuple(_KINDS))]
                 for k in (kinds if isinstance(kinds, list) else [kinds])]
    one = kinds[0] if kinds and len(set(kinds)) == 1 else None
    if kinds and one is None:
        imp.ignore("--cp-comm-type", f"{' '.join(kinds)}: estimated as p2p (per-layer types mixing them are not "
                                     "modelled)")
    elif one not in (None, "p2p"):
        imp.set("cp_comm", one, "--cp-comm-type")
    if one == "a2a+p2p":
        if sizes is None:
            raise bad(imp.source, "--cp-comm-type", f"a2a+p2p needs {_HCP} A R (Megatron asserts it)")
        levels = [as_int(imp.source, _HCP, v) for v in (sizes if isinstance(sizes, list) else [sizes])]
        if len(levels) != 2 or levels[0] * levels[1] != cp:
            raise bad(imp.source, _HCP, f"a2a+p2p takes two levels, a2a and p2p, whose product is "
                                        f"--context-parallel-size {cp}; got {' '.join(map(str, levels))} "
                                        "(Megatron builds a group per level, but Transformer Engine's "
                                        "attn_forward_func_with_cp asserts cp_group = [a2a_cp_group, "
                                        "p2p_cp_group]: a third level does not run)")
        imp.set("cp_a2a", levels[0], _HCP)
    elif sizes is not None:
        imp.ignore(_HCP, "used by --cp-comm-type a2a+p2p only")


def args(plan: Any, system: Any) -> str:
    """The ``--cp-comm-type`` (and a2a+p2p's ``--hierarchical-context-parallel-sizes``) of a resolved plan; TE's
    spelling ``all_gather`` (its ``attn_forward_func_with_cp`` rejects ``allgather``)."""
    if plan.cp == 1 or plan.cp_comm == "p2p":
        return ""
    if plan.cp_comm != "a2a+p2p":
        return f" --cp-comm-type {'all_gather' if plan.cp_comm == 'allgather' else plan.cp_comm}"
    from dse.specs.rules_cp import a2a_degree

    a = a2a_degree(plan, system)
    return f" --cp-comm-type a2a+p2p {_HCP} {a} {plan.cp // a}"
