"""dse.formulas.offload and dse.formulas.near_storage: identities, published checks, broadcasting."""

import math

import numpy as np
import pytest

from dse.formulas import near_storage as NS, offload as O

P = 4e9


def test_optimizer_state_bytes_and_the_three_quarters_rule():
    assert O.optimizer_state_bytes("adam") == 12
    assert O.optimizer_state_bytes("sgd-momentum") == 8
    assert O.optimizer_state_bytes("adagrad") == 8
    # Smart-Infinity Sec. VII-F: SGD and AdaGrad move 3/4 of Adam's offload volume (baseline, per parameter).
    adam = O.shared_link_traffic(1.0, "baseline", O.optimizer_state_bytes("adam"))["total"]
    for opt in ("sgd-momentum", "adagrad"):
        assert O.shared_link_traffic(1.0, "baseline",
                                     O.optimizer_state_bytes(opt))["total"] == pytest.approx(0.75 * adam)


def test_placement_per_tier_and_optimizer():
    where = O.placement(3, "nvme", "cpu", "adam")
    assert where == {"params_fp16": "cpu", "grads_fp16": "gpu", "grads_fp32": "nvme", "master_fp32": "nvme",
                     "momentum": "nvme", "variance": "nvme"}
    assert O.placement(2, "cpu", "cpu")["params_fp16"] == "gpu"       # params are partitioned only by stage 3
    assert "variance" not in O.placement(3, "csd", "cpu", "sgd-momentum")
    assert "momentum" not in O.placement(3, "csd", "cpu", "adagrad")


def test_bytes_by_tier_counts_every_class_once():
    tiers = O.bytes_by_tier(P, O.placement(3, "nvme", "cpu"))
    assert sum(tiers["nvme"].values()) == 16 * P                      # 12 B state + 4 B fp32 gradients
    assert sum(tiers["cpu"].values()) == 2 * P
    assert sum(tiers["gpu"].values()) == 2 * P                        # fp16 gradients (transient)
    assert sum(sum(t.values()) for t in tiers.values()) == 20 * P     # ZeRO-Infinity Sec. 3: 20 B/param


def test_deepspeed_pinned_buffer_defaults():
    assert O.optimizer_swap_buffer_bytes() == 4 * 1e9 * 4
    assert O.optimizer_swap_buffer_bytes(4e7, 40) == pytest.approx(6.4e9)   # Smart-Infinity's config
    assert O.param_swap_buffer_bytes() == 5 * 1e8 * 2
    assert NS.handler_buffer_bytes(4e7) == pytest.approx(640e6)              # 16 B x largest sub-group
    assert NS.handler_buffer_bytes(4e7, 12, 2, 2) == pytest.approx(640e6)    # released code: g16 + param16


def test_table1_identities():
    base = O.shared_link_traffic(P, "baseline")
    su = O.shared_link_traffic(P, "smartupdate")
    comp = O.shared_link_traffic(P, "smartupdate", compression=0.02)
    assert base["total"] == 32 * P and su["total"] == 8 * P
    assert comp["total"] == pytest.approx(4.08 * P)
    for t in (base, su, comp):
        assert t["total"] == pytest.approx(sum(v for k, v in t.items() if k != "total"))
    # Table I in M = 2P: baseline opt read 6M, write 6M, grads 2M + 2M
    assert base["states_read"] == 6 * 2 * P and base["gradients_write"] == 2 * 2 * P
    with pytest.raises(ValueError):
        O.shared_link_traffic(P, "bogus")


def test_zero_infinity_efficiency_checks_of_the_note():
    # params/grads at bsz*seq = 1024, 70 TFLOP/s: 50 % at 68 GB/s (paper: "> 70 GB/s gives > 50 %")
    ait = O.arithmetic_intensity("params", 1024, 1)
    assert O.required_bandwidth(0.5, ait, 70e12) == pytest.approx(68.36e9, rel=1e-3)
    assert O.offload_efficiency(ait, 70e9, 70e12) > 0.5
    # optimizer states, 90 % at 2048 tokens: 1.23 TB/s (paper: "nearly 1.5 TB/s")
    ait = O.arithmetic_intensity("optimizer", 2048, 1)
    assert O.required_bandwidth(0.9, ait, 70e12) == pytest.approx(1.23e12, rel=1e-2)
    # activation checkpoints at hd = 2048: 1.42 GB/s for 50 %; hd = 8192: 0.36 GB/s
    for hidden, need in ((2048, 1.42e9), (8192, 0.356e9)):
        ait = O.arithmetic_intensity("activations", 1, 1, hidden)
        assert O.required_bandwidth(0.5, ait, 70e12) == pytest.approx(need, rel=1e-2)
    # inverse of each other
    assert O.offload_efficiency(ait, O.required_bandwidth(0.8, ait, 70e12), 70e12) == pytest.approx(0.8)
    with pytest.raises(ValueError):
        O.arithmetic_intensity("activations", 1, 1)
    with pytest.raises(ValueError):
        O.arithmetic_intensity("bogus", 1, 1)


def test_shared_link_saturation():
    assert O.array_bandwidth(1, 3e9, 8e9) == 3e9
    assert O.array_bandwidth(2, 3e9, 8e9) == 6e9
    assert O.array_bandwidth(10, 3e9, 8e9) == 8e9
    assert O.array_bandwidth(10, 3e9) == 30e9


def test_swap_update_serial_or_pipelined():
    assert O.swap_update_time(2.0, 1.0, 1.5) == 4.5
    assert O.swap_update_time(2.0, 1.0, 1.5, pipelined=True) == 3.5
    assert O.swap_update_time(0.5, 3.0, 0.5, pipelined=True) == 3.0


def test_compression_ratio_conventions():
    assert NS.compression_ratio(0.01) == pytest.approx(0.02)                        # paper: c = 2k
    assert NS.compression_ratio(0.01, 2, 4, 2) == pytest.approx(0.03)               # released code vs fp16: 3k
    assert NS.compression_ratio(0.01, 2, 4, 4) == pytest.approx(0.015)              # released code vs fp32: 1.5k
    assert NS.kept_fraction(NS.compression_ratio(0.037, 2, 4, 4), 2, 4, 4) == pytest.approx(0.037)


def test_device_update_between_serial_and_pipelined():
    r, k, w = 2.0, 1.0, 2.5
    assert NS.device_update_time(r, k, w, 0.0) == r + k + w
    assert NS.device_update_time(r, k, w, 1.0) == max(r + k, w)
    assert max(r + k, w) < NS.device_update_time(r, k, w, 0.4) < r + k + w


def test_smartupdate_internal_bytes_and_link_bytes():
    inside = NS.internal_bytes(P, 10)
    assert inside["read"] == pytest.approx(16 * P / 10) and inside["write"] == pytest.approx(12 * P / 10)
    assert NS.link_bytes(P) == {"down": 4 * P, "up": 4 * P}
    assert NS.link_bytes(P, 2, 2) == {"down": 2 * P, "up": 2 * P}                   # released code: fp16 exchange


def test_upload_concurrent_or_serial():
    assert NS.upload_bandwidth(10, 3.94e9, 7.5e9) == 7.5e9
    assert NS.upload_bandwidth(1, 3.94e9, 7.5e9) == 3.94e9
    assert NS.upload_bandwidth(10, 3.94e9, 7.5e9, concurrent=False) == 3.94e9


def test_update_time_shrinks_with_drives_to_the_upload_floor():
    times = [NS.update_time(P, n) for n in (1, 2, 4, 8, 16, 1024, 100000)]
    assert all(a > b for a, b in zip(times, times[1:]))
    assert times[-1] == pytest.approx(4 * P / 8e9, rel=0.01)


def test_topk_sort_time_is_memory_bound():
    assert NS.topk_time(1e9, 1e12, 0.5) == pytest.approx(1e9 * 54 / 0.5e12)


def test_formulas_broadcast_over_arrays():
    n = np.array([1, 2, 4, 8, 16])
    c = np.array([1.0, 0.5, 0.1, 0.02, 0.01])
    out = NS.update_time(P, n, grad_bytes_on_drive=4 * c)
    loop = [NS.update_time(P, int(a), grad_bytes_on_drive=4 * float(b)) for a, b in zip(n, c)]
    np.testing.assert_allclose(out, loop)
    np.testing.assert_allclose(O.array_bandwidth(n, 3e9, 8e9), [min(int(a) * 3e9, 8e9) for a in n])
    np.testing.assert_allclose(O.shared_link_traffic(P, "smartupdate", compression=c)["total"], 4 * P * (1 + c))
    np.testing.assert_allclose(NS.device_update_time(np.array([1.0, 2.0]), 0.5, 2.0, np.array([0.0, 1.0])), [3.5, 2.5])


def test_every_public_formula_states_its_equation():
    import inspect

    for mod in (O, NS):
        for name, fn in inspect.getmembers(mod, inspect.isfunction):
            if name.startswith("_") or fn.__module__ != mod.__name__:
                continue
            doc = inspect.getdoc(fn) or ""
            assert "Formula:" in doc, f"{mod.__name__}.{name} has no Formula: line"
    assert math.isfinite(O.cpu_optimizer_time(P))
