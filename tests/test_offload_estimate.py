"""Storage offload in `dse.estimate`: tiers, phases, traffic, costs, feasibility, array safety."""

import copy
import dataclasses

import numpy as np
import pytest

from dse.estimate import base, estimate, offload, resolve, run
from dse.estimate.__init__ import TIME_PARTS

MODEL = "smart-infinity-gpt2-4.0b"
HW = "smart-infinity-a5000"
PAPER = dict(micro_batch=4, recompute="full", attention="math", zero=3, precision="fp16", offload_params="cpu")


def est(**kw):
    return estimate(MODEL, kw.pop("hw", HW), **{**PAPER, **kw})


def parts_sum(t):
    return sum(t.get(k, 0.0) for k in TIME_PARTS)


@pytest.mark.parametrize("fields", [
    dict(offload_optimizer="nvme"),
    dict(offload_optimizer="csd"),
    dict(offload_optimizer="csd", gradient_compression=0.02),
    dict(offload_optimizer="csd", transfer_overlap=False, exchange_dtype="fp16"),
    dict(offload_optimizer="cpu"),
    dict(offload_optimizer="nvme", offload_params="nvme"),
    dict(offload_optimizer="nvme", swap_pipeline=True),
    dict(offload_optimizer="gpu", offload_params="cpu"),
    dict(offload_optimizer="cpu", offload_params="gpu"),
])
def test_time_components_and_phases_explain_the_iteration(fields):
    r = est(**fields)
    t = r["time"]
    assert parts_sum(t) == pytest.approx(t["iteration"], rel=1e-9)
    assert t["phase_forward"] + t["phase_backward"] + t["phase_update"] == pytest.approx(t["iteration"], rel=1e-12)
    assert t["io_exposed"] >= 0 and t["optimizer"] >= 0
    for tier in r["memory"].values():
        assert tier["total"] == pytest.approx(sum(tier[k] for k in ("weights", "gradients", "optimizer", "activations",
                                                                    "buffers")))
    assert r["throughput"]["tokens_per_s"] == pytest.approx(4 * 1024 / t["iteration"])


def test_traffic_totals_equal_the_sum_of_their_parts():
    for fields in (dict(offload_optimizer="nvme"), dict(offload_optimizer="csd", gradient_compression=0.05),
                   dict(offload_optimizer="nvme", offload_params="nvme")):
        r = est(**fields)
        links = r["offload"]["links"]
        tr = r["traffic"]
        assert tr["gpu_host"] == pytest.approx(links["gpu_host"]["bytes_to_gpu"] + links["gpu_host"]["bytes_from_gpu"])
        assert tr["host_switch"] == pytest.approx(links["host_switch"]["bytes_down"] + links["host_switch"]["bytes_up"])
        assert tr["switch_drives"] == pytest.approx(links["switch_drives"]["per_drive"] * r["offload"]["drives"])
        if "csd_internal" in links:
            csd = links["csd_internal"]
            assert tr["csd_internal"] == pytest.approx(csd["bytes_read"] + csd["bytes_written"])


def test_memory_moves_between_tiers():
    P = est(offload_optimizer="nvme")["model"]["params"]
    gpu_only = estimate(MODEL, HW, micro_batch=4, recompute="full", zero=3, precision="fp16")
    r = est(offload_optimizer="nvme")
    assert gpu_only["memory"]["gpu"]["optimizer"] == pytest.approx(12 * P)
    assert r["memory"]["gpu"]["optimizer"] == 0 and r["memory"]["gpu"]["weights"] == 0
    assert r["memory"]["storage"]["optimizer"] == pytest.approx(12 * P)
    assert r["memory"]["storage"]["gradients"] == pytest.approx(4 * P)
    assert r["memory"]["host"]["weights"] == pytest.approx(2 * P)
    # pinned swap buffers: sub_group_size default 1e9 (DeepSpeed) x 4 buffers x 4 B on top of the reservation
    assert r["memory"]["host"]["buffers"] == pytest.approx(gpu_only["memory"]["host"]["buffers"] + 16e9)
    assert r["memory"]["storage"]["capacity"] == pytest.approx(10 * 3.84e12)
    cpu = est(offload_optimizer="cpu")
    assert cpu["memory"]["host"]["optimizer"] == pytest.approx(12 * P) and cpu["memory"]["storage"]["total"] == 0
    pn = est(offload_optimizer="nvme", offload_params="nvme")
    assert pn["memory"]["storage"]["weights"] == pytest.approx(2 * P) and pn["memory"]["host"]["weights"] == 0
    sgd = est(offload_optimizer="nvme", optimizer="sgd-momentum")
    assert sgd["memory"]["storage"]["optimizer"] == pytest.approx(8 * P)


def test_shared_link_bytes_per_variant():
    P = est(offload_optimizer="nvme")["model"]["params"]
    assert est(offload_optimizer="nvme")["traffic"]["host_switch"] == pytest.approx(32 * P)
    assert est(offload_optimizer="csd")["traffic"]["host_switch"] == pytest.approx(8 * P)
    assert est(offload_optimizer="csd", exchange_dtype="fp16")["traffic"]["host_switch"] == pytest.approx(4 * P)
    assert est(offload_optimizer="csd", gradient_compression=0.02)["traffic"]["host_switch"] == pytest.approx(4.08 * P)
    adam = est(offload_optimizer="nvme")["traffic"]["host_switch"]
    for opt in ("sgd-momentum", "adagrad"):
        assert est(offload_optimizer="nvme", optimizer=opt)["traffic"]["host_switch"] == pytest.approx(0.75 * adam)
    # states never cross the shared link with SmartUpdate: inside the CSDs 16P read + 12P written
    assert est(offload_optimizer="csd")["traffic"]["csd_internal"] == pytest.approx(28 * P)


def test_bottleneck_link_and_required_bandwidth():
    base_r = est(offload_optimizer="nvme")
    assert base_r["offload"]["bottleneck_link"] == "host_switch"
    su = est(offload_optimizer="csd")
    assert su["offload"]["bottleneck_link"] == "csd_internal"
    assert est(offload_optimizer="csd", ssds=1)["offload"]["bottleneck_link"] == "csd_internal"
    req = base_r["offload"]["required_bandwidth"]
    assert req["optimizer_states"]["ait"] == pytest.approx(4 * 1024 / 4)
    assert req["params_grads"]["for_90pct"] > req["params_grads"]["for_50pct"]
    assert 0 < req["optimizer_states"]["efficiency"] < req["params_grads"]["efficiency"] < 1


def test_csd_prices_flow_into_the_cost():
    csd = est(offload_optimizer="csd")["cost"]
    nvme = est(offload_optimizer="nvme")["cost"]
    plain = est(offload_optimizer="nvme", hw="plain-nvme-a5000")["cost"]
    assert csd["capital_usd"] == pytest.approx(45000 + 2000 + 10 * 2400)   # SmartSSD ~ $2,400 (Sec. VII-I)
    assert nvme["capital_usd"] == csd["capital_usd"]      # SmartSSDs are bought whole, used as plain drives or not
    assert plain["capital_usd"] == pytest.approx(45000 + 2000 + 10 * 400)  # plain drives: $400 each
    assert est(offload_optimizer="cpu")["cost"]["storage_usd"] == pytest.approx(10 * 2400)   # no technique charge
    assert est(offload_optimizer="csd", ssds=4)["cost"]["storage_usd"] == pytest.approx(4 * 2400)
    assert csd["tokens_per_s_per_kusd"] > 0 and nvme["tokens_per_s_per_kusd"] > 0


def test_update_cannot_start_before_backward_and_compression_shortens_it():
    su = est(offload_optimizer="csd")
    comp = est(offload_optimizer="csd", gradient_compression=0.02)
    assert comp["time"]["phase_backward"] < su["time"]["phase_backward"]
    # same segments add: the update is never hidden under the backward
    assert comp["time"]["iteration"] >= comp["time"]["phase_backward"] + comp["time"]["phase_update"]


def test_states_that_do_not_fit_are_infeasible_not_errors():
    huge = dict(overrides=["model.layers=4000"])               # ~315B parameters: 16 B/param > one 3.84 TB drive
    r = estimate(MODEL, HW, **{**PAPER, "offload_optimizer": "nvme", "ssds": 1}, **huge)
    assert not r["feasible"] and any("storage memory" in v for v in r["violations"])
    r = estimate(MODEL, HW, **{**PAPER, "offload_optimizer": "cpu"}, overrides=["model.layers=1400"])
    assert not r["feasible"] and any("host memory" in v for v in r["violations"])
    r = est(offload_optimizer="csd", sub_group_size=1e9)        # 16 GB of handler buffers > 4 GiB FPGA DRAM
    assert not r["feasible"] and any("accelerator DRAM" in v for v in r["violations"])
    assert est(offload_optimizer="csd")["feasible"]


def test_no_offload_leaves_the_base_untouched():
    m, s, p = resolve(MODEL, HW, None, (), micro_batch=4, zero=3)
    assert not offload.active(p)
    c0 = base.compose(m, s, p)
    c1 = copy.deepcopy(c0)
    offload.apply(c1, m, s, p)
    assert c1["time"] == c0["time"] and c1["traffic"] == c0["traffic"]


def _flat(c):
    out = {}
    for sec in ("time", "traffic"):
        for k, v in c[sec].items():
            out[f"{sec}.{k}"] = v
    for tier, d in c["memory"].items():
        for k, v in d.items():
            out[f"memory.{tier}.{k}"] = v
    for k in ("tokens_per_s", "mfu"):
        out[f"throughput.{k}"] = c["throughput"][k]
    en = c.get("endurance", {})
    for k, v in en.items():
        if not isinstance(v, (str, dict)):
            out[f"endurance.{k}"] = v
    for k, v in en.get("bytes_written_per_iteration_by_source", {}).items():
        out[f"endurance.by_source.{k}"] = v
    return out


@pytest.mark.parametrize("fields", [dict(offload_optimizer="csd"), dict(offload_optimizer="nvme"),
                                    dict(offload_optimizer="csd", transfer_overlap=False),
                                    dict(offload_optimizer="nvme", offload_params="nvme")])
def test_apply_is_array_safe_over_drive_counts(fields):
    m, s, p = resolve(MODEL, HW, None, (), **{**PAPER, **fields})
    c0 = base.compose(m, s, p)
    ssds = np.array([1, 2, 3, 6, 10, 16])
    ca = copy.deepcopy(c0)
    offload.apply(ca, m, s, dataclasses.replace(p, ssds=ssds))
    flat = _flat(ca)
    for k, n in enumerate(ssds):
        cs = copy.deepcopy(c0)
        offload.apply(cs, m, s, dataclasses.replace(p, ssds=int(n)))
        for key, v in _flat(cs).items():
            got = np.broadcast_to(np.asarray(flat[key], dtype=float), ssds.shape)[k]
            assert got == pytest.approx(v, rel=1e-12), key
        assert ca["offload"]["bottleneck_link"][k] == cs["offload"]["bottleneck_link"]


def test_apply_is_array_safe_over_compression_ratios():
    m, s, p = resolve(MODEL, HW, None, (), **{**PAPER, "offload_optimizer": "csd"})
    c0 = base.compose(m, s, p)
    ratios = np.array([1.0, 0.5, 0.1, 0.02])
    ca = copy.deepcopy(c0)
    offload.apply(ca, m, s, dataclasses.replace(p, gradient_compression=ratios))
    for k, cr in enumerate(ratios):
        cs = copy.deepcopy(c0)
        offload.apply(cs, m, s, dataclasses.replace(p, gradient_compression=float(cr)))
        for key, v in _flat(cs).items():
            got = np.broadcast_to(np.asarray(_flat(ca)[key], dtype=float), ratios.shape)[k]
            assert got == pytest.approx(v, rel=1e-12), key


def test_run_json_is_serialisable():
    from dse.report.jsonout import dumps

    m, s, p = resolve(MODEL, HW, None, (), **{**PAPER, "offload_optimizer": "csd", "gradient_compression": 0.02})
    text = dumps(run(m, s, p))
    assert '"phase_update"' in text and '"csd_internal"' in text and '"bottleneck_link"' in text


# ------------------------------------------------------------------ drive wear (endurance)

SECONDS_PER_YEAR = 365.25 * 86400
PM983_TBW = 3.84e12 * 1.3 * 365 * 3          # SmartSSD's NVMe part: 3.84 TB, 1.3 DWPD, 3 years (5.47 PB)
AUDIT = dict(micro_batch=4, recompute="full", zero=3, precision="fp16", offload_params="cpu", ssds=6)


def _hand_lifetime(per_drive_per_iteration, iteration_s, tbw=PM983_TBW):
    """Years to the rated TBW: bytes per drive per iteration x iterations/s x seconds/year vs TBW."""
    return tbw / (per_drive_per_iteration * (1 / iteration_s) * SECONDS_PER_YEAR)


def test_nvme_offload_wears_the_drives_hand_computed():
    """The audit's command: ZeRO-Infinity, optimizer on 6 SmartSSDs' NVMe (RAID0), CPU update."""
    r = estimate("smart-infinity-gpt2-8.4b", HW, **AUDIT, offload_optimizer="nvme")
    P = r["parallelism"]["params_per_gpu"]                 # one GPU: it holds (and offloads) every parameter
    en = r["endurance"]
    grads, states = 4 * P, 12 * P                         # fp32 gradients swapped out; fp32 p, m, v written back
    per_drive = (grads + states) / 6                      # RAID0 stripes them over the 6 drives
    assert en["bytes_written_per_iteration_by_source"] == {"gradients": pytest.approx(grads),
                                                            "optimizer_states": pytest.approx(states),
                                                            "parameters": 0.0}
    assert en["bytes_written_per_iteration"] == pytest.approx(16 * P)
    assert en["bytes_written_per_iteration_per_drive"] == pytest.approx(per_drive)
    assert en["bytes_written_per_iteration"] == pytest.approx(r["offload"]["links"]["switch_drives"]["bytes_down"])
    assert en["drive"] == "samsung-smartssd" and en["rated_endurance_per_drive"] == pytest.approx(5.466e15, rel=1e-3)
    assert en["write_rate_per_drive"] == pytest.approx(per_drive / r["time"]["iteration"])
    assert en["lifetime_years"] == pytest.approx(_hand_lifetime(per_drive, r["time"]["iteration"]), rel=1e-12)
    assert 0.1 < en["lifetime_years"] < 1           # months, not years: 16 B per parameter every iteration


@pytest.mark.parametrize("cr", [1.0, 0.02])
def test_csd_update_wears_each_csd_hand_computed(cr):
    """SmartUpdate: the gradients land on each CSD's drive and its FPGA writes the updated states back to the NAND."""
    r = estimate("smart-infinity-gpt2-8.4b", HW, **AUDIT, offload_optimizer="csd", gradient_compression=cr)
    P = r["parallelism"]["params_per_gpu"]
    en = r["endurance"]
    grads, states = cr * 4 * P, 12 * P                    # fp32 exchange (default), c x 4P; Table I / Sec. IV-A
    assert en["bytes_written_per_iteration_by_source"]["gradients"] == pytest.approx(grads)
    assert en["bytes_written_per_iteration_by_source"]["optimizer_states"] == pytest.approx(states)
    assert en["bytes_written_per_iteration_by_source"]["optimizer_states"] == pytest.approx(
        r["offload"]["links"]["csd_internal"]["bytes_written"])
    per_drive = (grads + states) / 6
    assert en["bytes_written_per_iteration_per_drive"] == pytest.approx(per_drive)
    assert en["lifetime_years"] == pytest.approx(_hand_lifetime(per_drive, r["time"]["iteration"]), rel=1e-12)


def test_parameters_on_nvme_are_written_too_and_nothing_on_drives_means_no_endurance():
    both = est(offload_optimizer="nvme", offload_params="nvme", hw="plain-nvme-a5000")
    P = both["parallelism"]["params_per_gpu"]
    assert both["endurance"]["bytes_written_per_iteration_by_source"]["parameters"] == pytest.approx(2 * P)
    assert both["endurance"]["drive"] == "nvme-4tb-gen3"
    params_only = est(offload_optimizer="gpu", offload_params="nvme", hw="plain-nvme-a5000")
    assert params_only["endurance"]["bytes_written_per_iteration"] == pytest.approx(2 * P)
    assert params_only["endurance"]["lifetime_years"] > both["endurance"]["lifetime_years"]
    for fields in (dict(offload_optimizer="cpu"), dict(offload_optimizer="gpu", offload_params="cpu")):
        assert "endurance" not in est(**fields)          # no drive writes: no wear (the search reads it as inf)


def test_activation_offload_adds_its_writes_to_the_same_drives():
    kw = dict(AUDIT, offload_optimizer="nvme")
    alone = estimate("smart-infinity-gpt2-8.4b", HW, **kw)["endurance"]
    r = estimate("smart-infinity-gpt2-8.4b", HW, **kw, offload_activations="ssd")
    en, ao = r["endurance"], r["activation_offload"]
    src = en["bytes_written_per_iteration_by_source"]
    assert src["activations"] == pytest.approx(ao["bytes_offloaded_per_iteration"]) and src["activations"] > 0
    assert src["optimizer_states"] == alone["bytes_written_per_iteration_by_source"]["optimizer_states"]
    per_drive = (alone["bytes_written_per_iteration_per_drive"]
                 + ao["bytes_offloaded_per_iteration"] / ao["drives_per_gpu"])
    assert en["bytes_written_per_iteration_per_drive"] == pytest.approx(per_drive)
    assert en["write_rate_per_drive"] == pytest.approx(per_drive / r["time"]["iteration"])   # the final iteration
    # host-memory activation offload writes no drive but lengthens the iteration: the rate follows it
    h = estimate("smart-infinity-gpt2-8.4b", HW, **kw, offload_activations="host")
    assert "activations" not in h["endurance"]["bytes_written_per_iteration_by_source"]
    assert h["endurance"]["write_rate_per_drive"] == pytest.approx(
        alone["bytes_written_per_iteration_per_drive"] / h["time"]["iteration"])


def test_endurance_json_is_valid():
    import json

    from dse.report.jsonout import dumps

    def no_nan(token):
        raise AssertionError(f"invalid JSON token {token}")

    for fields in (dict(offload_optimizer="nvme"), dict(offload_optimizer="csd", gradient_compression=0.02)):
        m, s, p = resolve(MODEL, HW, None, (), **{**PAPER, **fields})
        out = json.loads(dumps(run(m, s, p)), parse_constant=no_nan)
        assert out["endurance"]["lifetime_years"] > 0
