"""dse.formulas.chiplet: collective volumes, weak-scaling ratios, SRAM, DRAM, overlap; arrays vs scalars."""

import inspect
import itertools

import numpy as np
import pytest

from dse.formulas import chiplet as C

LLAMA2_70B = dict(h=8192, heads=64, kv_heads=8, head_dim=128, ffn=28672, ffn_type="swiglu")
LLAMA31_405B = dict(h=16384, heads=128, kv_heads=8, head_dim=128, ffn=53248, ffn_type="swiglu")


def shape(m):
    return (m["h"], m["heads"], m["kv_heads"], m["head_dim"], m["ffn"], m["ffn_type"])


def test_every_public_formula_states_its_equation():
    for name, fn in inspect.getmembers(C, inspect.isfunction):
        if fn.__module__ == C.__name__ and not name.startswith("_"):
            assert "Formula:" in (fn.__doc__ or ""), name


def test_layer_gemms_match_the_notes_per_layer_parameters():
    assert C.gemm_parameters(C.layer_gemms(*shape(LLAMA2_70B))) == 855_638_016
    assert C.gemm_parameters(C.layer_gemms(*shape(LLAMA31_405B))) == 3_187_671_040


@pytest.mark.parametrize("n, one_d, two_d", [(16, 2611.2, 1558.9), (64, 621.7, 779.5), (256, 153.6, 389.7)])
def test_worked_table_llama2_70b(n, one_d, two_d):
    assert C.worked_check_ratio("megatron-1d", 855_638_016, 8192, 28672, 8, n) == pytest.approx(one_d, rel=1e-3)
    assert C.worked_check_ratio("hecaton-2d", 855_638_016, 8192, 28672, 8, n) == pytest.approx(two_d, rel=1e-3)


def test_worked_table_llama31_405b_weak_scaling_point():
    assert C.worked_check_ratio("megatron-1d", 3_187_671_040, 16384, 53248, 16, 239) == pytest.approx(306.6, rel=1e-3)
    assert C.worked_check_ratio("hecaton-2d", 3_187_671_040, 16384, 53248, 16, 239) == pytest.approx(792.9, rel=1e-3)


def test_megatron_without_regather_is_the_notes_four_allreduces():
    T, N = 4096, 64
    nop = C.layer_nop("megatron-1d", T, 1, *shape(LLAMA2_70B), 8, 8, regather=False)
    assert nop["forward"] + nop["backward"] == pytest.approx(8 * (N - 1) / N * T * 8192 * 2)
    # with the backward re-gather of X (Megatron sequence parallelism) two more all-gathers: 10 collectives
    nop = C.layer_nop("megatron-1d", T, 1, *shape(LLAMA2_70B), 8, 8)
    assert nop["forward"] + nop["backward"] == pytest.approx(10 * (N - 1) / N * T * 8192 * 2)
    # and the same ratio is the worked table's with 8 -> 10 collectives
    ratio = C.compute_to_communication("megatron-1d", T, 1, *shape(LLAMA2_70B), 8, 8)
    assert ratio == pytest.approx(621.714 * 8 / 10, rel=1e-4)


def test_megatron_volume_does_not_shrink_with_dies_but_2d_does():
    T = 4096
    v1 = [C.layer_nop("megatron-1d", T, 64, *shape(LLAMA2_70B), q, q)["forward"] for q in (4, 8, 16)]
    v2 = [C.layer_nop("hecaton-2d", T, 64, *shape(LLAMA2_70B), q, q)["forward"] for q in (4, 8, 16)]
    assert v1[2] / v1[0] == pytest.approx((255 / 256) / (15 / 16))
    assert v2[1] / v2[0] == pytest.approx((7 / 64) / (3 / 16))        # (q-1)/q^2
    assert v2[2] < v2[1] < v2[0]


def test_2d_volume_exact_formula_and_dimension_split():
    T, R, Cc, e = 4096, 4, 16, 2
    g = C.hecaton_2d_gemm_bytes(T, 100, 300, R, Cc, "column", e)
    assert g["forward_h"] == pytest.approx(T * 100 * e * (Cc - 1) / (R * Cc))
    assert g["forward_v"] == pytest.approx(T * 300 * e * (R - 1) / (R * Cc))
    assert g["backward_h"] == pytest.approx(2 * g["forward_h"])       # reduce-scatter dX + re-gather X
    assert g["backward_v"] == pytest.approx(g["forward_v"])           # all-gather dY
    r = C.hecaton_2d_gemm_bytes(T, 100, 300, R, Cc, "row", e)        # row GEMM: R and C swap roles
    assert r["forward_v"] == pytest.approx(T * 100 * e * (R - 1) / (R * Cc))
    assert r["forward_h"] == pytest.approx(T * 300 * e * (Cc - 1) / (R * Cc))
    no = C.hecaton_2d_gemm_bytes(T, 100, 300, R, Cc, "column", e, regather=False)
    assert no["backward_h"] == pytest.approx(g["forward_h"])


def test_2d_large_n_limit_approaches_the_notes_volume():
    # note: V ~ T e (k + n)/sqrt(N) per GEMM forward for R = C
    T, q = 1024, 256
    g = C.hecaton_2d_gemm_bytes(T, 1000, 3000, q, q, "column")
    assert g["forward_h"] + g["forward_v"] == pytest.approx(T * 2 * 4000 / q, rel=1 / q + 1e-9)


def test_summa_moves_weights_every_micro_batch():
    q, T = 8, 4096
    nop = C.layer_nop("summa-2d", T, 8, *shape(LLAMA2_70B), q, q)
    p = 855_638_016
    # vertical carries weights: 3 P e (q-1)/q^2 (+ no K/V gather: b = 8 is a multiple of R)
    assert nop["forward_v"] + nop["backward_v"] == pytest.approx(3 * p * 2 * (q - 1) / q**2)
    # weight traffic does not depend on the tokens: halving T leaves it unchanged
    half = C.layer_nop("summa-2d", T // 2, 8, *shape(LLAMA2_70B), q, q)
    assert half["forward_v"] == pytest.approx(nop["forward_v"])


def test_kv_gather_only_when_sequences_span_rows():
    args = (4096, 8, 128, 8, 8)
    assert C.kv_gather_bytes(*args, split=False) == 0
    assert C.kv_gather_bytes(*args, split=True) == pytest.approx(4096 * 2 * 8 * 128 * 2 * 7 / 64)
    whole = C.layer_nop("hecaton-2d", 4096, 8, *shape(LLAMA2_70B), 8, 8)
    split = C.layer_nop("hecaton-2d", 4096, 1, *shape(LLAMA2_70B), 8, 8)
    assert split["forward_v"] - whole["forward_v"] == pytest.approx(C.kv_gather_bytes(*args, split=True))


def test_weak_scaling_2d_constant_1d_halves():
    r1 = C.compute_to_communication("megatron-1d", 4096, 1, *shape(LLAMA31_405B), 15, 16) / \
        C.compute_to_communication("megatron-1d", 4096, 1, *shape(LLAMA2_70B), 8, 8)
    r2 = C.compute_to_communication("hecaton-2d", 4096, 1, *shape(LLAMA31_405B), 15, 16) / \
        C.compute_to_communication("hecaton-2d", 4096, 1, *shape(LLAMA2_70B), 8, 8)
    assert abs(r2 - 1) < 0.10
    assert r1 < 0.55


@pytest.mark.parametrize("rows, cols, factor", [(8, 8, 2), (3, 3, 1), (1, 8, 1), (2, 3, 2), (15, 16, 2), (9, 11, 1)])
def test_ring_bandwidth_factor(rows, cols, factor):
    assert C.ring_bandwidth_factor(rows, cols) == factor


def _exact_edge_hops(r, c):
    return np.mean([min(i, r - 1 - i, j, c - 1 - j) + 1 for i in range(r) for j in range(c)])


@pytest.mark.parametrize("rows, cols", [(4, 4), (8, 8), (6, 10), (15, 16), (2, 32)])
def test_edge_hops_close_to_enumeration(rows, cols):
    assert C.edge_hops(rows, cols) == pytest.approx(_exact_edge_hops(rows, cols), abs=0.15)


def test_mesh_geometry():
    assert C.mesh_perimeter_sides(8, 8) == 32
    assert C.dram_attach_points(8, 8, "edge", 2) == 64
    assert C.dram_attach_points(8, 8, "per-die", 1) == 64
    assert C.dram_attach_points(8, 8, "io-dies", 4) == 4
    assert C.interior_fraction(8, 8) == pytest.approx(36 / 64)
    assert C.inward_links(8, 8) == 24
    assert C.inward_links(2, 5) == 6 and C.interior_fraction(2, 5) == 0
    assert C.edge_injection_time(1e9, 2, 5, 1e9) == 0
    assert C.edge_injection_time(1e9, 8, 8, 1e9, "per-die") == 0


def test_sram_working_sets():
    one = [C.sram_per_die("megatron-1d", 4096, *shape(m), 8, 8)["activations"] for m in (LLAMA2_70B, LLAMA31_405B)]
    assert one[1] > 1.8 * one[0]                                       # 1D: full-width activations, grow with h
    two = [C.sram_per_die("hecaton-2d", 4096, *shape(LLAMA2_70B), q, q)["activations"] for q in (4, 8, 16)]
    assert two[0] > two[1] > two[2]                                    # 2D: fall with the mesh
    s = C.sram_per_die("summa-2d", 4096, *shape(LLAMA2_70B), 8, 8)
    assert s["buffers"] > 0
    d = C.sram_per_die("hecaton-2d", 4096, *shape(LLAMA2_70B), 8, 8, grad_bytes=4)
    assert d["weights"] == pytest.approx(2 * 855_638_016 * 2 / 64)
    assert d["gradients"] == pytest.approx(855_638_016 * 4 / 64)
    assert d["total"] == pytest.approx(d["weights"] + d["gradients"] + d["activations"] + d["buffers"])
    assert C.min_tile_sram(128) == 6 * 128 * 128 * 2


def test_dram_traffic_schedules():
    m, L, P, A, T, h = 16, 80, 1e9, 1e9, 4096, 8192
    W, G = L * P * 2, L * P * 4
    micro = C.dram_traffic(m, 1, L, P, 70e9, A, T, h)
    assert micro["weights"] == pytest.approx(2 * m * W)
    assert micro["gradients"] == pytest.approx((2 * m - 1) * G)
    assert micro["boundary"] == 0
    mini = C.dram_traffic(m, m, L, P, 70e9, A, T, h)
    assert mini["weights"] == pytest.approx(2 * W)
    assert mini["gradients"] == pytest.approx(G)
    assert mini["boundary"] == pytest.approx(3 * m * L * T * h * 2)
    for d in (micro, mini):
        assert d["activations"] == pytest.approx(2 * m * L * A)
        assert d["optimizer"] == pytest.approx(70e9 * (24 + 4 + 2))
        assert d["total"] == pytest.approx(d["forward"] + d["backward"] + d["optimizer"])
        assert d["total"] == pytest.approx(sum(d[k] for k in ("weights", "gradients", "activations", "boundary",
                                                              "optimizer")))
    foot = C.dram_footprint(4, L, 70e9, A, T, h)
    assert foot["activations"] == pytest.approx(4 * L * A + 4 * T * h * 2)
    assert C.dram_footprint(1, L, 70e9, A, T, h)["activations"] == pytest.approx(L * A)


def test_overlap_and_energy():
    assert C.overlapped_time(3.0, 1.0, 2.0, 1.0) == 3.0
    assert C.overlapped_time(3.0, 1.0, 2.0, 0.0) == 6.0
    assert C.overlapped_time(3.0, 1.0, 2.0, 0.5) == 4.5
    parts = C.iteration_energy(1e12, 1e9, 2e9, 3e9, 1e-12, 2e-12, 3e-12, 4e-12, 10.0, 2.0)
    assert parts["compute_j"] == pytest.approx(1.0)
    assert parts["static_j"] == 20.0
    assert parts["total_j"] == pytest.approx(1 + 0.002 + 0.006 + 0.012 + 20)


# ------------------------------------------------------------------- arrays vs scalar loops


@pytest.mark.parametrize("scheme", C.SCHEMES)
def test_layer_nop_and_ratio_broadcast(scheme):
    tokens = np.array([1024.0, 4096.0, 8192.0])
    q = np.array([4, 8, 16])
    b = np.array([1, 8, 16])
    arr = C.layer_nop(scheme, tokens, b, *shape(LLAMA2_70B), q, q)
    ratio = C.compute_to_communication(scheme, tokens, b, *shape(LLAMA2_70B), q, q)
    for i in range(3):
        one = C.layer_nop(scheme, float(tokens[i]), int(b[i]), *shape(LLAMA2_70B), int(q[i]), int(q[i]))
        for key, v in one.items():
            assert arr[key][i] == pytest.approx(v), key
        assert ratio[i] == pytest.approx(C.compute_to_communication(scheme, float(tokens[i]), int(b[i]),
                                                                    *shape(LLAMA2_70B), int(q[i]), int(q[i])))


@pytest.mark.parametrize("scheme", C.SCHEMES)
def test_sram_broadcast(scheme):
    tokens = np.array([512.0, 4096.0])
    rows = np.array([4, 8])
    arr = C.sram_per_die(scheme, tokens, *shape(LLAMA2_70B), rows, rows)
    for i in range(2):
        one = C.sram_per_die(scheme, float(tokens[i]), *shape(LLAMA2_70B), int(rows[i]), int(rows[i]))
        for key, v in one.items():
            assert np.broadcast_to(arr[key], (2,))[i] == pytest.approx(v), key


def test_geometry_and_dram_broadcast():
    rows, cols = np.array([1, 2, 3, 8, 9]), np.array([8, 3, 3, 8, 11])
    k = np.array([1, 2, 4, 8, 16])
    arrays = (C.ring_bandwidth_factor(rows, cols), C.edge_hops(rows, cols), C.inward_links(rows, cols),
              C.edge_injection_time(1e12, rows, cols, 64e9), C.dram_attach_points(rows, cols, "edge", 2),
              C.dram_traffic(16, k, 80, 1e9, 70e9, 1e9, 4096, 8192)["total"],
              C.dram_footprint(k, 80, 70e9, 1e9, 4096, 8192)["total"])
    for i, (r, c, kk) in enumerate(zip(rows.tolist(), cols.tolist(), k.tolist())):
        scalars = (C.ring_bandwidth_factor(r, c), C.edge_hops(r, c), C.inward_links(r, c),
                   C.edge_injection_time(1e12, r, c, 64e9), C.dram_attach_points(r, c, "edge", 2),
                   C.dram_traffic(16, kk, 80, 1e9, 70e9, 1e9, 4096, 8192)["total"],
                   C.dram_footprint(kk, 80, 70e9, 1e9, 4096, 8192)["total"])
        for a, s in zip(arrays, scalars):
            assert a[i] == pytest.approx(s)


def test_overlap_broadcast():
    c, n, d, eta = (np.array(x) for x in ([1.0, 5.0], [4.0, 2.0], [2.0, 1.0], [1.0, 0.3]))
    out = C.overlapped_time(c, n, d, eta)
    for i in range(2):
        assert out[i] == pytest.approx(C.overlapped_time(float(c[i]), float(n[i]), float(d[i]), float(eta[i])))


def test_all_schemes_and_kinds_covered():
    assert set(C.SCHEMES) == {"megatron-1d", "summa-2d", "hecaton-2d"}
    with pytest.raises(ValueError):
        C.layer_nop("ring-3d", 4096, 1, *shape(LLAMA2_70B), 8, 8)
    for kind, _scheme in itertools.product(("column", "row"), ("megatron-1d",)):
        assert C.megatron_1d_gemm_bytes(4096, 8192, 8192, 64, kind)["forward"] > 0
