"""Brute-force check of the NoP volumes: simulate each scheme's algorithm on a small mesh with numpy.

Every collective is run as messages between mesh neighbours (a line of dies for the 2D schemes, a ring
for Megatron 1D); the test counts the bytes each die receives and each link direction carries, checks that
the distributed products equal the dense X W, dY W^T and X^T dY, and compares the counts with
:func:`dse.formulas.chiplet.hecaton_2d_gemm_passes`, :func:`~dse.formulas.chiplet.hecaton_2d_gemm_bytes`,
:func:`~dse.formulas.chiplet.megatron_1d_gemm_bytes`, :func:`~dse.formulas.chiplet.summa_2d_gemm_bytes` and
:func:`~dse.formulas.chiplet.layer_nop`'s busiest-link bytes.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from dse.formulas import chiplet as C

E = 2   # bytes per element counted (the arrays are float64 for exact sums)


class Net:
    """Byte counters of a mesh: the die's share per dimension, carried per directed link.

    A die's share of a collective is what it receives in an all-gather and what it sends in a
    reduce-scatter: on a line both are the same for every die, (n-1)/n of the tensor (the end dies of a
    line receive less in a reduce-scatter and send less in an all-gather; the sum over dies is the same).
    """

    def __init__(self):
        self.recv = defaultdict(float)       # (die, dim) -> bytes (the die's share)
        self.link = defaultdict(float)       # (src, dst) -> bytes

    def send(self, src, dst, arr, dim, owner):
        self.recv[(owner, dim)] += arr.size * E
        self.link[(src, dst)] += arr.size * E


def line_allgather(net, dies, shards, dim):
    """All-gather along a line of dies by forwarding to both sides; returns what each die then holds."""
    n = len(dies)
    have = [{p: shards[p]} for p in range(n)]
    for p in range(n - 1):                       # rightward: die p forwards every shard from its left
        for src in range(p + 1):
            net.send(dies[p], dies[p + 1], shards[src], dim, dies[p + 1])
            have[p + 1][src] = shards[src]
    for p in range(n - 1, 0, -1):                # leftward
        for src in range(p, n):
            net.send(dies[p], dies[p - 1], shards[src], dim, dies[p - 1])
            have[p - 1][src] = shards[src]
    return [[have[p][s] for s in range(n)] for p in range(n)]


def line_reduce_scatter(net, dies, parts, dim):
    """Reduce-scatter along a line: parts[p][t] is die p's partial of target t's block; partial sums flow
    towards each target from both sides, one message per link per target."""
    n = len(dies)
    out = [parts[p][p].copy() for p in range(n)]
    for t in range(n):
        acc = None
        for p in range(t):                       # from the left, accumulating
            acc = parts[p][t] if acc is None else acc + parts[p][t]
            net.send(dies[p], dies[p + 1], acc, dim, dies[p])
        if acc is not None:
            out[t] += acc
        acc = None
        for p in range(n - 1, t, -1):            # from the right
            acc = parts[p][t] if acc is None else acc + parts[p][t]
            net.send(dies[p], dies[p - 1], acc, dim, dies[p])
        if acc is not None:
            out[t] += acc
    return out


def blocks(a, n, axis):
    return np.split(a, n, axis=axis)


def hecaton_gemm(R, Cc, X, W, dY, kind):
    """Run one GEMM's forward, dgrad and wgrad on an R x C mesh; return results and one Net per product.

    Column GEMM: W[k_i, n_j] on die (i, j); X arrives as X[t_j, k_i]; Y leaves as Y[t_i, n_j].
    A row GEMM is the column GEMM of the transposed mesh (rows and columns swap roles).
    """
    if kind == "row":    # transpose the mesh: a row GEMM is a column GEMM with R and C (h and v) swapped
        res, nets = hecaton_gemm(Cc, R, X, W, dY, "column")
        swap = {"h": "v", "v": "h"}
        for net in nets.values():
            net.recv = defaultdict(float, {((j, i), swap[d]): b for ((i, j), d), b in net.recv.items()})
            net.link = defaultdict(float, {((s[1], s[0]), (t[1], t[0])): b for (s, t), b in net.link.items()})
        return res, nets
    nets = {p: Net() for p in ("forward", "dgrad", "wgrad")}
    Xb = [blocks(xk, Cc, 0) for xk in blocks(X, R, 1)]            # Xb[i][j] = X[t_j, k_i]
    Wb = [blocks(wk, Cc, 1) for wk in blocks(W, R, 0)]            # Wb[i][j] = W[k_i, n_j]
    dYb = [blocks(dyn, R, 0) for dyn in blocks(dY, Cc, 1)]        # dYb[j][i] = dY[t_i, n_j]
    row = lambda i: [(i, j) for j in range(Cc)]                   # noqa: E731
    col = lambda j: [(i, j) for i in range(R)]                    # noqa: E731
    # forward: all-gather X[:, k_i] along row i; partial Y[:, n_j]; reduce-scatter along column j
    xg = {i: line_allgather(nets["forward"], row(i), Xb[i], "h") for i in range(R)}
    X_full = {(i, j): np.concatenate(xg[i][j], axis=0) for i in range(R) for j in range(Cc)}
    Y = {}
    for j in range(Cc):
        parts = [blocks(X_full[(i, j)] @ Wb[i][j], R, 0) for i in range(R)]
        for i, blk in enumerate(line_reduce_scatter(nets["forward"], col(j), parts, "v")):
            Y[(i, j)] = blk                                       # Y[t_i, n_j]
    # dgrad: all-gather dY[:, n_j] along column j; partial dX[:, k_i]; reduce-scatter along row i
    dyg = {j: line_allgather(nets["dgrad"], col(j), dYb[j], "v") for j in range(Cc)}
    dY_full = {(i, j): np.concatenate(dyg[j][i], axis=0) for i in range(R) for j in range(Cc)}
    dX = {}
    for i in range(R):
        parts = [blocks(dY_full[(i, j)] @ Wb[i][j].T, Cc, 0) for j in range(Cc)]
        for j, blk in enumerate(line_reduce_scatter(nets["dgrad"], row(i), parts, "h")):
            dX[(i, j)] = blk                                      # dX[t_j, k_i]
    # wgrad: regather X[:, k_i] along row i (stored sharded); dY[:, n_j] reused; dW[k_i, n_j] stays local
    xg2 = {i: line_allgather(nets["wgrad"], row(i), Xb[i], "h") for i in range(R)}
    dW = {(i, j): np.concatenate(xg2[i][j], axis=0).T @ dY_full[(i, j)] for i in range(R) for j in range(Cc)}
    Yd = np.block([[Y[(i, j)] for j in range(Cc)] for i in range(R)])
    dXd = np.block([[dX[(i, j)] for i in range(R)] for j in range(Cc)])
    dWd = np.block([[dW[(i, j)] for j in range(Cc)] for i in range(R)])
    return {"Y": Yd, "dX": dXd, "dW": dWd}, nets


def per_die(net, R, Cc, dim):
    return np.array([[net.recv[((i, j), dim)] for j in range(Cc)] for i in range(R)])


def link_max(net, dim, mesh_dim_of):
    return max((b for (s, t), b in net.link.items() if mesh_dim_of(s, t) == dim), default=0.0)


def dim_of(s, t):
    return "h" if s[0] == t[0] else "v"


MESHES = [(2, 2), (2, 4), (4, 2), (4, 4)]


@pytest.mark.parametrize("R, Cc", MESHES)
@pytest.mark.parametrize("kind", ["column", "row"])
def test_hecaton_2d_products_and_bytes_per_die(R, Cc, kind):
    rng = np.random.default_rng(R * 10 + Cc)
    T, k, n = 2 * R * Cc, 3 * R * Cc, 5 * R * Cc
    X, W, dY = rng.normal(size=(T, k)), rng.normal(size=(k, n)), rng.normal(size=(T, n))
    res, nets = hecaton_gemm(R, Cc, X, W, dY, kind)
    # the distributed algorithm computes the dense products
    np.testing.assert_allclose(res["Y"], X @ W, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(res["dX"], dY @ W.T, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(res["dW"], X.T @ dY, rtol=1e-10, atol=1e-10)
    # every die receives exactly the formula's bytes, per product and per mesh dimension
    f = C.hecaton_2d_gemm_passes(T, k, n, R, Cc, kind, E)
    for p, net in nets.items():
        for d in ("h", "v"):
            np.testing.assert_allclose(per_die(net, R, Cc, d), f[f"{p}_{d}"], err_msg=f"{kind} {p} {d}")
    # the per-pass sums are the backward the estimate uses
    b = C.hecaton_2d_gemm_bytes(T, k, n, R, Cc, kind, E)
    for d in ("h", "v"):
        assert b[f"forward_{d}"] == pytest.approx(f[f"forward_{d}"])
        assert b[f"backward_{d}"] == pytest.approx(f[f"dgrad_{d}"] + f[f"wgrad_{d}"])
    # the busiest link direction of a line carries one die's share (the formula's critical bytes: time)
    for p, net in nets.items():
        for d in ("h", "v"):
            assert link_max(net, d, dim_of) == pytest.approx(f[f"{p}_{d}"])
    # every message crosses one link: the links carry N times a die's share (the byte-hops energy counts)
    for p, net in nets.items():
        assert sum(net.link.values()) == pytest.approx(R * Cc * (f[f"{p}_h"] + f[f"{p}_v"]))


def test_hecaton_2d_column_then_row_chains_without_relayout():
    """The column GEMM's output layout is the row GEMM's input layout: a 2-GEMM MLP on 2 x 4 dies moves only
    the four collectives the formulas count."""
    R, Cc = 2, 4
    rng = np.random.default_rng(0)
    T, h, f = 16, 24, 40
    X, W1, W2 = rng.normal(size=(T, h)), rng.normal(size=(h, f)), rng.normal(size=(f, h))
    (r1, n1) = hecaton_gemm(R, Cc, X, W1, np.zeros((T, f)), "column")
    (r2, n2) = hecaton_gemm(R, Cc, r1["Y"], W2, np.zeros((T, h)), "row")
    np.testing.assert_allclose(r2["Y"], X @ W1 @ W2, rtol=1e-10)
    gemms = (("fc1", h, f, "column"), ("fc2", f, h, "row"))
    total_h = sum(C.hecaton_2d_gemm_passes(T, k, n, R, Cc, kind, E)["forward_h"] for _, k, n, kind in gemms)
    total_v = sum(C.hecaton_2d_gemm_passes(T, k, n, R, Cc, kind, E)["forward_v"] for _, k, n, kind in gemms)
    got_h = per_die(n1["forward"], R, Cc, "h") + per_die(n2["forward"], R, Cc, "h")
    got_v = per_die(n1["forward"], R, Cc, "v") + per_die(n2["forward"], R, Cc, "v")
    np.testing.assert_allclose(got_h, total_h)
    np.testing.assert_allclose(got_v, total_v)
    # the collectives run one after another, so a dimension's time is the sum of each collective's busiest
    # link: the per-die share summed over the GEMMs (layer_nop's critical bytes per dimension) ...
    busiest = {d: sum(link_max(net, d, dim_of) for net in (n1["forward"], n2["forward"])) for d in ("h", "v")}
    assert busiest["h"] == pytest.approx(total_h) and busiest["v"] == pytest.approx(total_v)
    # ... an upper bound on any one link's total: the all-gather loads the links into the end dies, the
    # reduce-scatter the links out of them, so summed over both no single link direction carries all of it
    links = defaultdict(float)
    for net in (n1["forward"], n2["forward"]):
        for key, b in net.link.items():
            links[key] += b
    assert max(v for key, v in links.items() if dim_of(*key) == "h") < total_h


def ring_allgather(net, n, shards):
    """Unidirectional ring all-gather over n dies: n-1 steps, each die forwards the shard it got last."""
    have = [{p: shards[p]} for p in range(n)]
    cur = list(range(n))
    for _ in range(n - 1):
        nxt = []
        for p in range(n):
            s = cur[p]
            net.send(p, (p + 1) % n, shards[s], "ring", (p + 1) % n)
            have[(p + 1) % n][s] = shards[s]
            nxt.append(s)
        cur = [nxt[(p - 1) % n] for p in range(n)]
    return [[have[p][s] for s in range(n)] for p in range(n)]


@pytest.mark.parametrize("N", [4, 8, 16])
def test_megatron_1d_column_gemm_on_a_ring(N):
    rng = np.random.default_rng(N)
    T, k, n = 2 * N, 3 * N, 4 * N
    X, W = rng.normal(size=(T, k)), rng.normal(size=(k, n))
    net = Net()
    got = ring_allgather(net, N, blocks(X, N, 0))                 # sequence-parallel shards of X
    Y = np.concatenate([np.concatenate(got[p], axis=0) @ w for p, w in enumerate(blocks(W, N, 1))], axis=1)
    np.testing.assert_allclose(Y, X @ W, rtol=1e-10)
    f = C.megatron_1d_gemm_bytes(T, k, n, N, "column", E)
    for p in range(N):
        assert net.recv[(p, "ring")] == pytest.approx(f["forward"])
    # in a ring every link carries what a die receives; the estimate splits it over both directions (2B)
    assert max(net.link.values()) == pytest.approx(f["forward"])


def line_broadcast(net, dies, root, arr, dim):
    for p in range(root, len(dies) - 1):
        net.send(dies[p], dies[p + 1], arr, dim, dies[p + 1])
    for p in range(root, 0, -1):
        net.send(dies[p], dies[p - 1], arr, dim, dies[p - 1])


@pytest.mark.parametrize("q", [2, 4])
def test_summa_2d_forward_on_a_grid(q):
    rng = np.random.default_rng(q)
    T, k, n = 2 * q, 3 * q, 5 * q
    X, W = rng.normal(size=(T, k)), rng.normal(size=(k, n))
    Xb = [blocks(xt, q, 1) for xt in blocks(X, q, 0)]             # Xb[i][j] = X[t_i, k_j]
    Wb = [blocks(wk, q, 1) for wk in blocks(W, q, 0)]             # Wb[i][j] = W[k_i, n_j]
    steps = [Net() for _ in range(q)]             # one Net per SUMMA step: the steps run one after another
    Y = {(i, j): np.zeros((T // q, n // q)) for i in range(q) for j in range(q)}
    for step, net in enumerate(steps):
        for i in range(q):
            line_broadcast(net, [(i, j) for j in range(q)], step, Xb[i][step], "h")
        for j in range(q):
            line_broadcast(net, [(i, j) for i in range(q)], step, Wb[step][j], "v")
        for i in range(q):
            for j in range(q):
                Y[(i, j)] += Xb[i][step] @ Wb[step][j]
    np.testing.assert_allclose(np.block([[Y[(i, j)] for j in range(q)] for i in range(q)]), X @ W, rtol=1e-10)
    f = C.summa_2d_gemm_bytes(T, k, n, q, E)
    for d in ("h", "v"):                      # activations along rows, weights along columns
        np.testing.assert_allclose(sum(per_die(net, q, q, d) for net in steps), f[f"forward_{d}"])
    # time: each step's broadcast keeps its busiest link busy for one block, so q blocks in all -- the
    # q/(q-1) stretch of layer_nop's SUMMA critical bytes
    busiest = sum(link_max(net, "v", dim_of) for net in steps)
    assert busiest == pytest.approx(f["forward_v"] * q / (q - 1))
