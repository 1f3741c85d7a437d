"""One plan-validity rule and the two ways a rule table is read: :func:`check` (the first broken rule as a
one-line error) and :func:`holds` (every rule that applies, array-safe, for the search). The tables are in
:mod:`dse.specs.rules` (and :mod:`dse.specs.fp8_rules`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dse.errors import InputError


@dataclass(frozen=True)
class Rule:
    name: str                                  # the search's exclusion reason
    fields: tuple[str, ...]                    # plan fields, model.<field>, hardware.<field> it concerns
    ok: Callable                               # (plan, model, system) -> bool or bool array: the rule holds
    message: Callable[..., str]                # (plan, model, system) -> one line, for a scalar plan that breaks it
    when: Callable[..., bool] | None = None    # (plan, model, system) -> the rule applies (scalar fields only)

    def applies(self, plan, model, system) -> bool:
        return self.when is None or bool(self.when(plan, model, system))


def holds(rules, plan, model, system) -> dict:
    """``{rule name: ok}`` for every rule of the table that applies (array-safe in the numeric plan fields)."""
    return {r.name: r.ok(plan, model, system) for r in rules if r.applies(plan, model, system)}


def check(rules, plan, model, system, where: str = "plan") -> None:
    """Raise :class:`InputError` with the message of the first rule of the table a scalar plan breaks."""
    for r in rules:   # r.applies inlined: check runs on every scalar estimate
        if (r.when is None or r.when(plan, model, system)) and not r.ok(plan, model, system):
            raise InputError(f"{where}: {r.message(plan, model, system)}")
