"""dse.estimate with array inputs: the same numbers and verdicts as a loop of scalar calls, and the same errors."""

from __future__ import annotations

import numpy as np
import pytest

import dse
from dse.errors import InputError

SMART = dict(micro_batch=4, global_batch=4, seq_len=1024, recompute="full", attention="math", zero=3, precision="fp16",
             offload_params="cpu", sub_group_size=4e7)

# (model, hardware, scalar plan fields, array field, values)
CASES = [
    ("llama2-7b", "dgx-a100-80gb", dict(tp=2), "micro_batch", [1, 2, 4, 64]),          # 64 does not fit: infeasible
    ("gpt2-xl", "a100-cluster-800g", dict(dp=8, micro_batch=2, global_batch=64), "pp", [1, 2, 4]),
    ("llama2-7b", "a100-cluster-800g", dict(pp=1, dp=8, micro_batch=1, global_batch=64), "tp", [1, 2, 4, 8]),
    ("llama2-7b", "a100-cluster-800g", dict(tp=2, micro_batch=1, global_batch=64), "dp", [1, 2, 4, 8, 16]),
    ("llama2-7b", "dgx-a100-80gb", dict(tp=8, micro_batch=1), "seq_len", [512, 1024, 2048, 4096]),
    ("llama2-7b", "dgx-a100-80gb", dict(tp=1, dp=8, micro_batch=1), "zero", [0, 1, 2, 3]),
    ("llama2-7b", "dgx-a100-80gb", dict(tp=1, dp=8), "global_batch", [8, 16, 64]),
    ("smart-infinity-gpt2-4.0b", "smart-infinity-a5000",
     dict(SMART, offload_optimizer="csd", gradient_compression=0.02),
     "ssds", [1, 2, 6, 10]),
    ("smart-infinity-gpt2-4.0b", "smart-infinity-a5000", dict(SMART, offload_optimizer="csd", ssds=10),
     "gradient_compression", [0.01, 0.02, 0.1, 1.0]),
    ("smart-infinity-gpt2-4.0b", "smart-infinity-a5000", dict(SMART, offload_optimizer="nvme"), "ssds", [1, 4, 10]),
    ("smart-infinity-gpt2-4.0b", "smart-infinity-a5000",
     dict({k: v for k, v in SMART.items() if k != "sub_group_size"}, offload_optimizer="csd", ssds=6),
     "sub_group_size", [1e7, 4e7, 1e9]),                                                # 1e9: accelerator DRAM violated
    ("llama2-13b", "dgx-a100-80gb", dict(tp=8, offload_activations="ssd"), "micro_batch", [1, 2, 4, 8]),
    ("llama2-13b", "dgx-a100-80gb", dict(tp=8, micro_batch=4, offload_activations="ssd"), "offload_layers",
     [0, 10, 40]),
    ("llama2-13b", "ssdtrain-a100-optane", dict(tp=2, micro_batch=4, offload_activations="ssd"), "ssds", [1, 2, 7]),
    ("gpt2-medium", "dgx-h100", dict(dp=1, offload_activations="host", activation_offload_mechanism="hooks"),
     "micro_batch", [1, 4, 64]),
    ("gpt2-medium", "dgx-h100", dict(dp=1, micro_batch=4, global_batch=16, pp=2, offload_activations="host",
                                     activation_offload_mechanism="hooks"), "offload_layers", [0, 5, 12]),
    ("llama2-70b", "chiplet-train-8x8", dict(global_batch=16, chiplet_scheme="hecaton-2d"), "micro_batch", [1, 2, 4]),
    ("llama2-70b", "chiplet-train-8x8", dict(global_batch=16, micro_batch=1), "chiplet_overlap", [0.0, 0.5, 1.0]),
    ("llama2-70b", "chiplet-train-8x8", dict(global_batch=16, micro_batch=1), "chiplet_minibatch", [1, 4, 16]),
]


def _leaves(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, f"{prefix}{k}.")
    else:
        yield prefix[:-1], obj


def _same(vector: dict, i, scalar: dict) -> None:
    got = dict(_leaves(vector))
    # a scalar call also names the defaults it filled in and its input warnings (an array call does not)
    want = {k: v for k, v in _leaves(scalar) if not k.startswith(("defaults.", "warnings"))}
    assert set(got) == set(want)
    for key, w in want.items():
        g = got[key]
        if isinstance(g, np.ndarray):
            g = g[i]
            if isinstance(w, (int, float)) and not isinstance(w, bool):
                assert np.isclose(float(g), w, rtol=1e-12, atol=0, equal_nan=True), (key, i, g, w)
                continue
            g = list(g) if isinstance(w, list) else (g.item() if hasattr(g, "item") else g)
        assert g == w, (key, i, g, w)


@pytest.mark.parametrize("model,hw,fields,name,values", CASES, ids=[f"{c[1]}-{c[3]}" for c in CASES])
def test_array_field_equals_loop_of_scalars(model, hw, fields, name, values):
    r = dse.estimate(model, hw, **fields, **{name: np.array(values)})
    assert r["time"]["iteration"].shape == (len(values),)
    for i, v in enumerate(values):
        _same(r, i, dse.estimate(model, hw, **fields, **{name: v}))


def test_some_cases_exercise_infeasible_scenarios():
    r = dse.estimate("llama2-7b", "dgx-a100-80gb", tp=2, micro_batch=[1, 64])
    assert r["feasible"].tolist() == [True, False]
    assert r["violations"][0] == [] and "gpu memory" in r["violations"][1][0]
    assert r["bottleneck"][1].startswith("Infeasible")
    fields = {**SMART, "offload_optimizer": "csd", "ssds": 6, "sub_group_size": [4e7, 1e9]}
    r = dse.estimate("smart-infinity-gpt2-4.0b", "smart-infinity-a5000", **fields)
    assert r["feasible"].tolist() == [True, False]
    assert any("accelerator DRAM" in v for v in r["violations"][1])


def test_two_arrays_broadcast_to_a_grid():
    mb = np.array([1, 2, 4])[:, None]
    tp = np.array([1, 2, 4, 8])[None, :]
    r = dse.estimate("llama2-7b", "dgx-a100-80gb", dp=1, global_batch=64, micro_batch=mb, tp=tp)
    assert r["time"]["iteration"].shape == (3, 4)
    assert r["plan"]["micro_batch"].shape == (3, 4) and r["plan"]["recompute"] == "none"
    one = dse.estimate("llama2-7b", "dgx-a100-80gb", dp=1, global_batch=64, micro_batch=2, tp=4)
    assert r["time"]["iteration"][1, 2] == pytest.approx(one["time"]["iteration"], rel=1e-12)
    assert r["bottleneck"][1, 2] == one["bottleneck"]


def test_lists_are_arrays_and_every_numeric_leaf_has_the_shape():
    r = dse.estimate("llama2-7b", "dgx-a100-80gb", tp=2, micro_batch=[1, 2, 4])
    for key, v in _leaves(r):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise AssertionError(f"{key} is a scalar {v!r}")
        if isinstance(v, np.ndarray):
            assert v.shape == (3,), key
    assert r["model"]["name"] == "llama2-7b" and r["plan"]["attention"] == "flash"


def test_plan_object_with_array_fields():
    from dse.specs.plan import Plan

    r = dse.estimate("llama2-7b", "dgx-a100-80gb", Plan(tp=2), micro_batch=np.array([1, 2]))
    assert r["plan"]["tp"].tolist() == [2, 2]


@pytest.mark.parametrize("fields,needle", [
    (dict(micro_batch=[1, 0]), "micro_batch: must be greater than 0, got 0"),
    (dict(tp=[1, 3]), "--tp 3 does not divide the model's 32 attention heads"),
    (dict(micro_batch=[1, 2.5]), "micro_batch: expected an integer, got 2.5"),
    (dict(dp=1, global_batch=16, micro_batch=[1, 3]), "--micro-batch 3 does not divide global batch / dp = 16"),
    (dict(recompute=["none", "full"]), "plan.recompute: array values are allowed for numeric fields only"),
    (dict(sequence_parallel=[True, False]), "plan.sequence_parallel: array values are allowed for numeric fields only"),
    (dict(micro_batch=[]), "plan.micro_batch: the array is empty"),
    (dict(micro_batch=[1, 2], tp=[1, 2, 4]), "do not broadcast together: micro_batch (2,), tp (3,)"),
    (dict(micro_batch=np.array([True, False])), "plan.micro_batch: array values must be numbers"),
])
def test_bad_array_values_raise_one_line_errors(fields, needle):
    with pytest.raises(InputError) as exc:
        dse.estimate("llama2-7b", "dgx-a100-80gb", **fields)
    msg = str(exc.value)
    assert needle in msg and "\n" not in msg


def test_error_names_the_scenario():
    with pytest.raises(InputError, match=r"\(array scenario tp=3\)"):
        dse.estimate("llama2-7b", "dgx-a100-80gb", tp=np.array([1, 2, 3]))


# (model, hardware, scalar plan fields, hardware path, values): hardware fields as arrays through overrides
HW_CASES = [
    ("llama2-7b", "dgx-a100-80gb", dict(tp=2), "hardware.node.gpu.hbm_bandwidth", [1.0e12, 2.039e12, 3.35e12]),
    ("llama2-7b", "dgx-a100-80gb", dict(tp=2, micro_batch=8), "hardware.node.gpu.hbm_capacity",
     ["40 GiB", "80 GiB", "141 GiB"]),                                                  # 40 GiB: infeasible
    ("llama2-70b", "a100-cluster-800g", dict(tp=8, pp=4, dp=4, global_batch=64), "hardware.node.network.bandwidth",
     ["200 Gb/s", "800 Gb/s", "3200 Gb/s"]),
    ("smart-infinity-gpt2-4.0b", "smart-infinity-a5000", dict(SMART, offload_optimizer="csd", ssds=6),
     "hardware.node.storage.uplink.bandwidth", ["8 GB/s", "16 GB/s", "32 GB/s"]),
    ("llama2-13b", "ssdtrain-a100-optane", dict(tp=2, micro_batch=4, offload_activations="ssd"),
     "hardware.node.storage.device.read_bandwidth", ["3.5 GB/s", "7.2 GB/s", "14 GB/s"]),
    ("llama2-70b", "chiplet-train-8x8", dict(global_batch=16, micro_batch=1), "hardware.die.sram",
     ["128 MiB", "192 MiB", "256 MiB"]),                                               # area follows the SRAM
]


@pytest.mark.parametrize("model,hw,fields,path,values", HW_CASES,
                         ids=[f"{c[1]}-{c[3].split('.')[-1]}" for c in HW_CASES])
def test_array_hardware_field_equals_loop_of_scalars(model, hw, fields, path, values):
    r = dse.estimate(model, hw, **fields, overrides=[(path, values)])
    assert r["time"]["iteration"].shape == (len(values),)
    for i, v in enumerate(values):
        _same(r, i, dse.estimate(model, hw, **fields, overrides=[(path, v)]))


def test_hardware_and_plan_arrays_broadcast_together():
    """A plan array and a hardware array (the --set string form, with units) make a grid; each cell is its scalar."""
    mb = np.array([1, 4, 8])[:, None]
    r = dse.estimate("llama2-7b", "dgx-a100-80gb", tp=2, micro_batch=mb,
                     overrides=["hardware.node.gpu.hbm_capacity=[40 GiB, 80 GiB]"])
    assert r["feasible"].shape == (3, 2)
    for i, b in enumerate((1, 4, 8)):
        for j, cap in enumerate(("40 GiB", "80 GiB")):
            one = dse.estimate("llama2-7b", "dgx-a100-80gb", tp=2, micro_batch=b,
                               overrides=[f"hardware.node.gpu.hbm_capacity={cap}"])
            assert r["feasible"][i, j] == one["feasible"]
            assert r["time"]["iteration"][i, j] == pytest.approx(one["time"]["iteration"], rel=1e-12)


def test_hardware_array_errors_name_the_field_and_scenario():
    with pytest.raises(InputError, match=r"hbm_capacity: must be greater than 0.*array scenario"):
        dse.estimate("llama2-7b", "dgx-a100-80gb", overrides=["hardware.node.gpu.hbm_capacity=[40 GiB, -1 GiB]"])
    with pytest.raises(InputError, match=r"model.hidden: array values are allowed for hardware fields"):
        dse.estimate("llama2-7b", "dgx-a100-80gb", overrides=[("model.hidden", [4096, 5120])])
    with pytest.raises(InputError, match="the array is empty"):
        dse.estimate("llama2-7b", "dgx-a100-80gb", overrides=[("hardware.node.gpu.hbm_capacity", [])])


def test_megatron_math_attention_arrays_equal_scalar_calls_where_the_fused_softmax_runs():
    """Megatron's fused softmax row carried its kernels only on the array path, so an H100 (which prices each
    stack kernel's fixed time) gave a vectorised estimate 0.19 ms slower per micro-batch than the scalar one, and a
    BLOOM search fell back to scalar evaluation; both paths now carry the same row."""
    import numpy as np

    from dse.estimate import estimate

    kw = dict(stack="megatron", dp=1, seq_len=1024, zero=0, attention="math", tp=1)
    arr = estimate("gpt2-medium", "dgx-h100", micro_batch=np.array([1, 2]), **kw)
    for i, b in enumerate((1, 2)):
        one = estimate("gpt2-medium", "dgx-h100", micro_batch=b, **kw)
        for key in ("iteration", "compute", "overhead", "host_load"):
            assert float(np.asarray(arr["time"][key])[i]) == pytest.approx(one["time"][key], rel=1e-12), key
