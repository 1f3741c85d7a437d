"""The scalar estimate's shortcuts give what the plain path gives (issue 13: a new plan per call).

The plan is built without ``__init__`` (:meth:`dse.specs.plan.Plan.resolved_from`), fields are
converted in the order given and only re-checked in field order when one is bad
(:func:`dse.specs._schema.arguments`), and kernel times are kept per GPU spec
(:func:`dse.estimate.kernel_table.kernel_times`): each must agree with the plain path.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import dse
from dse.catalog import load_hardware, load_model
from dse.errors import InputError
from dse.estimate import base, kernel_table, resolve, run
from dse.specs import _schema
from dse.specs.plan import Plan


@pytest.fixture(scope="module")
def specs():
    return load_model("llama2-7b"), load_hardware("a100-cluster-800g")


@pytest.mark.parametrize("fields", [{}, {"tp": 2, "dp": 4, "micro_batch": 2, "recompute": "selective"},
                                    {"pp": 4, "global_batch": 64, "schedule": "interleaved", "virtual_stages": 2},
                                    {"zero": 3, "offload_optimizer": "cpu", "precision": "bf16-pure"}])
def test_resolved_from_is_the_plan_init_builds(specs, fields):
    model, system = specs
    args = _schema.arguments(Plan, fields, "plan: ")
    fast, plain = Plan.resolved_from(args, model, system), Plan(**args).resolved(model, system)
    assert fast == plain
    assert list(vars(fast).items()) == list(vars(plain).items())   # the JSON's plan section: same fields, same order
    assert dataclasses.replace(fast, tp=8).tp == 8 and hash(fast) == hash(plain)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.tp = 4  # type: ignore[misc]


def test_fields_in_any_order_convert_alike():
    given = {"micro_batch": "2", "seq_len": 2048.0, "tp": 2, "recompute": "full", "ssds": "auto"}
    reordered = dict(reversed(list(given.items())))
    assert _schema.arguments(Plan, given, "plan: ") == _schema.arguments(Plan, reordered, "plan: ") == {
        "tp": 2, "micro_batch": 2, "seq_len": 2048, "recompute": "full", "ssds": None}


@pytest.mark.parametrize("data, message", [
    # two bad fields given in reverse field order: the first in field order is reported, as before
    ({"micro_batch": 0, "tp": 0}, "plan: tp: must be greater than 0, got 0"),
    ({"recompute": "some", "tp": "x"}, "plan: tp: expected an integer, got 'x'"),
    ({"micro_batch": 0, "bogus": 1}, "plan: bogus: unknown field 'bogus'"),
])
def test_the_first_problem_in_field_order_is_reported(data, message):
    with pytest.raises(InputError) as err:
        _schema.arguments(Plan, data, "plan: ")
    assert str(err.value).startswith(message)


def test_a_new_plan_every_call_equals_a_fresh_resolve():
    for gb in (8, 16, 24):
        fast = dse.estimate("gpt2-xl", "a100-cluster-800g", dp=8, global_batch=gb)
        numbers = {k: v for k, v in fast.items() if k not in ("defaults", "warnings")}   # the public call's extras
        assert numbers == run(*resolve("gpt2-xl", "a100-cluster-800g", dp=8, global_batch=gb))
        assert fast["plan"]["global_batch"] == gb and fast["throughput"]["samples_per_s"] > 0


def test_kernel_times_kept_per_gpu_spec_and_recomputed_for_another(specs):
    model, system = specs
    plan = resolve(model, system, tp=2, dp=4)[2]
    c = base.compose_memory(model, system, plan)
    tables, lk = c["terms"].kernels, base.links(system, plan)
    first = kernel_table.kernel_times(tables, system, plan, c["peak_flops"], lk)
    assert kernel_table.kernel_times(tables, system, plan, c["peak_flops"], lk) is first   # kept
    # an equal-looking spec with a slower GPU (a new object): computed afresh, not served the kept times
    gpu = dataclasses.replace(system.node.gpu, hbm_bandwidth=system.node.gpu.hbm_bandwidth / 4)
    slower = dataclasses.replace(system, node=dataclasses.replace(system.node, gpu=gpu))
    other = kernel_table.kernel_times(tables, slower, plan, c["peak_flops"], lk)
    assert other is not first and other["layer_fwd"] > first["layer_fwd"]


def test_kernel_times_of_array_hardware_are_not_kept(specs):
    model, system = specs
    plan = resolve(model, system, tp=2, dp=4)[2]
    c = base.compose_memory(model, system, plan)
    tables, lk = c["terms"].kernels, base.links(system, plan)
    gpu = dataclasses.replace(system.node.gpu, hbm_bandwidth=np.array([1e12, 2e12]))
    vector = dataclasses.replace(system, node=dataclasses.replace(system.node, gpu=gpu))
    kept = len(kernel_table._TIMES)
    out = kernel_table.kernel_times(tables, vector, plan, c["peak_flops"], lk)
    assert np.shape(out["layer_fwd"]) == (2,) and len(kernel_table._TIMES) == kept
