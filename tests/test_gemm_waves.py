"""Tile and wave quantization of GEMMs (dse.formulas.compute.gemm_wave_efficiency) and its direction in an estimate.

The closed form is checked against an explicit count: every output tile is dealt to the SMs one per SM per
wave, and the GEMM lasts as many waves as the busiest SM runs.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from dse.catalog import load_system
from dse.estimate import run
from dse.formulas import compute as C
from dse.specs.model import ModelSpec
from dse.specs.plan import Plan


def _brute(m, n, sms, batch=1):
    """The best tile by dealing every output tile to the SMs; work done / time taken, at the flat rate."""
    best = 0.0
    for tm, tn in C.GEMM_TILES:
        load = [0] * sms                                   # tiles each SM runs
        tiles = [(g, i, j) for g in range(batch) for i in range(0, m, tm) for j in range(0, n, tn)]
        for idx, _ in enumerate(tiles):
            load[idx % sms] += 1
        waves = max(load)
        rate = (tm * tn / (tm + tn)) / (256 * 128 / (256 + 128))   # operand-bound: relative intensity
        useful = m * n * batch / sms                       # output elements per SM at the flat rate
        best = max(best, useful / (waves * tm * tn / rate))
    return best


@pytest.mark.parametrize("m,n,sms,batch", [
    (64, 64, 4, 1), (200, 130, 3, 1), (384, 96, 7, 2), (1000, 72, 5, 1), (128, 128, 1, 3), (520, 260, 6, 1),
    (256, 512, 16, 1), (2048, 384, 108, 1), (4096, 1152, 108, 1),
])
def test_closed_form_matches_an_explicit_count_of_tiles_and_waves(m, n, sms, batch):
    assert C.gemm_wave_efficiency(m, n, sms, batch) == pytest.approx(_brute(m, n, sms, batch))


def test_closed_form_special_cases():
    # a whole number of waves of the largest tile: no loss
    assert C.gemm_wave_efficiency(27648, 128, 108) == 1.0
    assert C.gemm_wave_efficiency(256 * 12, 128 * 11, 132) == 1.0
    # one wave plus one tile of the largest tile costs two waves, unless a smaller tile does better
    assert C.gemm_wave_efficiency(256 * 109, 128, 108) == pytest.approx(max(109 / 216, 0.75 * 218 / 324))
    # one 64x64 tile on 108 SMs: the smallest tile (3/8 of the rate) on one SM of 108
    assert C.gemm_wave_efficiency(64, 64, 108) == pytest.approx(0.375 / 108)
    # tile quantization: 136 columns need two 128-wide tiles (the second one 8/128 used)
    assert C.gemm_wave_efficiency(27648, 136, 108) == pytest.approx(136 / 256)
    # no SM count: not modelled
    assert C.gemm_wave_efficiency(64, 64, 0) == 1.0
    # a large GEMM: 8,192 tiles of 256x128 in 63 waves of 132, within 2 % of the flat rate
    assert C.gemm_wave_efficiency(16384, 16384, 132) == pytest.approx(8192 / (63 * 132))


def test_broadcasts_over_arrays_like_scalars():
    m = np.array([64, 2048, 4096, 16384])
    sms = np.array([108, 108, 132, 132])
    got = C.gemm_wave_efficiency(m, 1024, sms, 2)
    want = [C.gemm_wave_efficiency(int(a), 1024, int(b), 2) for a, b in zip(m, sms)]
    np.testing.assert_allclose(got, want)


def _small_gpt_per_token(tp, mb, sms):
    """Iteration time per token of a 24-layer GPT (h 1024) on one node of 8 A100s, with the GPU's SM count set."""
    system = load_system("a100-cluster-800g")
    gpu = dataclasses.replace(system.node.gpu, sms=sms)
    system = dataclasses.replace(system, node=dataclasses.replace(system.node, gpu=gpu))
    model = ModelSpec(name="gpt-h1024", layers=24, hidden=1024, heads=16, vocab=51200, max_seq_len=2048,
                      ffn_type="gelu", norm="layernorm", bias=True, position="learned", tied_embeddings=True,
                      dropout=0.1, source="test").resolved()
    plan = Plan(tp=tp, pp=1, dp=8 // tp, micro_batch=mb, global_batch=64, seq_len=2048, recompute="full",
                attention="math", sequence_parallel=False, zero=0, precision="fp16", grad_dtype="half")
    return run(model, system, plan)["time"]["iteration"] / (64 * 2048)


def test_waves_slow_wide_tensor_parallelism_at_micro_batch_1_more_than_narrow_at_4():
    """The issue's direction: small GEMMs (tp 8, micro-batch 1) lose more to partial waves than large ones."""
    flat = _small_gpt_per_token(8, 1, None) / _small_gpt_per_token(1, 4, None)
    waves = _small_gpt_per_token(8, 1, 108) / _small_gpt_per_token(1, 4, 108)
    assert waves > flat
    assert _small_gpt_per_token(8, 1, 108) > _small_gpt_per_token(8, 1, None)
    assert not math.isnan(waves)
