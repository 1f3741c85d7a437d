"""The console section of an FP8 estimate: where a layer's time goes, and the speedup over bf16."""

from __future__ import annotations

from rich import box
from rich.table import Table

from dse.units import fmt


def render_fp8(con, r: dict) -> None:
    """Print the ``fp8`` section: shares of a layer's kernel time, the weights' cast, bf16 time and speedup."""
    f = r["fp8"]
    tab = Table(title=f"FP8 (Transformer Engine, {r['plan'].get('fp8_scaling', 'delayed')} scaling): a layer's kernel "
                      "time, forward + backward — why the gain is below 2x", box=box.SIMPLE_HEAVY,
                title_justify="left", show_header=False)
    tab.add_column("part")
    tab.add_column("share", justify="right")
    tab.add_row("linear GEMMs in FP8 (at the 2x peak)", f"{100 * f['fp8_gemm_share']:.1f}%")
    tab.add_row("attention, other GEMMs (bf16)", f"{100 * f['bf16_compute_share']:.1f}%")
    tab.add_row("norms, activation, residuals (bf16)", f"{100 * f['elementwise_share']:.1f}%")
    tab.add_row("FP8 casts and transposes (added)", f"{100 * f['cast_share']:.1f}%")
    tab.add_row("weights' FP8 cast, per iteration", f"{fmt(f['weight_cast_time'], 's')} "
                                                     f"({100 * f['weight_cast_share']:.1f}% of it)")
    if "bf16_iteration" in f:
        tab.add_row("same plan in bf16: iteration, GPU memory",
                    f"{fmt(f['bf16_iteration'], 's')}, {fmt(f['bf16_gpu_memory'], 'bytes')}")
        tab.add_row("speedup over bf16", f"{f['speedup_vs_bf16']:.2f}x")
    con.print(tab)
