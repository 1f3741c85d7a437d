"""The vectorised plan rules (dse.specs.plan.plan_rules) agree with check_plan.

Both read one table (dse/specs/rules.py; tests/test_plan_rule_table.py exercises each rule
on its own). The plans here are drawn from every Plan field's own metadata (choices, ranges),
so a field added to Plan later is exercised too: a check made outside the table (in
make_plan, a spec's validation) without a rule makes this test fail.
"""

from __future__ import annotations

import dataclasses
import random
import zlib

import numpy as np
import pytest

from dse.catalog import load_model
from dse.errors import InputError
from dse.specs import _schema
from dse.specs.plan import Plan, check_plan, plan_rules

SMALL_INTS = [1, 2, 3, 4, 5, 6, 8, 12, 16, 25, 32, 48, 64, 80, 96, 128]


def random_value(rng, name, tp, meta):
    tp, optional = _schema._unwrap_optional(tp)
    if optional and rng.random() < 0.5:
        return None
    if meta.get("choices"):
        return rng.choice(list(meta["choices"]))
    if tp is bool:
        return rng.random() < 0.5
    if tp is int:
        if rng.random() < 0.6:                 # keep valid plans common: most rules then hold
            return 1 if (meta.get("ge") or 0) <= 1 else meta["ge"]
        lo = meta["ge"] if meta.get("ge") is not None else (meta["gt"] + 1 if meta.get("gt") is not None else 0)
        hi = meta["le"] if meta.get("le") is not None else 10**9
        vals = [v for v in SMALL_INTS + [0, 1024, 2048, 4096, 1000, 1536] if lo <= v <= hi]
        return rng.choice(vals)
    if tp is float:
        return rng.choice([0.0, 0.5, 1.0, 2.0])
    return None


SPECIAL = {"chiplet_mesh": ["8x8", "4x16", "6x6", "2x2"],   # rarely set: each is valid with few other choices
           "lora_dropout": [0.1], "paged_optimizer": [True], "schedule": ["interleaved", "gpipe", "dualpipe"],
           "etp": [None]}                                      # etp other than tp: MoE models only


def random_data(rng):
    data = {}
    for name, (f, tp) in _schema._fields(Plan).items():
        if rng.random() < 0.7:              # most fields keep their default: valid plans stay common
            continue
        if name in SPECIAL:
            v = rng.choice(SPECIAL[name]) if rng.random() < 0.3 else None
        else:
            v = random_value(rng, name, tp, f.metadata)
        if v is not None:
            data[name] = v
    try:
        _schema.build(Plan, data, "plan")
    except InputError:
        return None
    return data


SYSTEMS = ["a100-cluster-800g", "plain-nvme-a100", "smart-infinity-a100", "ssdtrain-a100-optane", "chiplet-train-8x8"]


@pytest.mark.parametrize("model_name", ["gpt2-xl", "llama2-70b"])
@pytest.mark.parametrize("system_name", SYSTEMS)
def test_plan_rules_agree_with_make_plan(model_name, system_name):
    """plan_rules(resolved plan) holds everywhere exactly when dse.estimate.make_plan accepts the plan."""
    from dse.estimate import make_plan
    from dse.search.evaluate import load_hardware

    model = load_model(model_name)
    system = load_hardware(system_name)
    rng = random.Random(zlib.crc32(f"{model_name} {system_name}".encode()) % 1000)   # stable across processes
    n = invalid = 0
    while n < 1500:
        data = random_data(rng)
        if data is None:
            continue
        n += 1
        try:
            make_plan(model, system, dict(data))
            raised = False
        except InputError:
            raised = True
        plan = _schema.build(Plan, data, "plan").resolved(model, system)
        rules = plan_rules(plan, model, system)
        ok = all(bool(v) for v in rules.values())
        assert raised == (not ok), (data, [k for k, v in rules.items() if not v])
        invalid += raised
    assert 0.05 * n < invalid < n - 10         # both outcomes are exercised (at least 10 valid plans)


def test_plan_rules_broadcast_over_arrays():
    model = load_model("llama2-70b")
    tp = np.array([1, 2, 3, 4, 8, 16], dtype=float).reshape(6, 1, 1)
    pp = np.array([1, 4, 80, 81], dtype=float).reshape(1, 4, 1)
    mb = np.array([1, 3, 4], dtype=float).reshape(1, 1, 3)
    base = Plan(global_batch=96, dp=8, zero=1)
    arr = dataclasses.replace(base, tp=tp, pp=pp, micro_batch=mb).resolved(model)
    rules = plan_rules(arr, model)
    ok = np.ones((6, 4, 3), dtype=bool)
    for v in rules.values():
        ok &= np.broadcast_to(v, ok.shape)
    for i, t in enumerate(tp.ravel()):
        for j, p in enumerate(pp.ravel()):
            for k, b in enumerate(mb.ravel()):
                scalar = dataclasses.replace(base, tp=int(t), pp=int(p), micro_batch=int(b)).resolved(model)
                try:
                    check_plan(scalar, model)
                    valid = True
                except InputError:
                    valid = False
                assert ok[i, j, k] == valid


def test_resolved_is_array_safe_and_unchanged_for_scalars():
    from dse.catalog import load_system

    model, system = load_model("gpt2-xl"), load_system("a100-cluster-800g")
    p = Plan(tp=1, pp=4, dp=2, micro_batch=2).resolved(model, system)
    assert p.global_batch == 2 * 2 * 4 * 4 and p.seq_len == 1024 and p.zero == 1
    q = Plan(tp=2, pp=2, micro_batch=1).resolved(model, system)
    assert q.dp == 2 and type(q.dp) is int                 # fills one node of 8 GPUs
    arr = Plan(pp=np.array([1.0, 4.0]), tp=np.array([1.0, 3.0]), micro_batch=2).resolved(model, system)
    assert arr.dp.tolist() == [8.0, 1.0] and arr.global_batch.tolist() == [16.0, 32.0]
