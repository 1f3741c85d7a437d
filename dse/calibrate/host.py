"""A host's ``dispatch_scale`` and ``checkpoint_dispatch_scale`` from its own measurement (a ratio, not a fit).

``dse measure`` times the host's dispatch speed into its micro row (``host``: :mod:`dse.measure.host`), as
``scripts/measure_host.py`` writes ``data/h200/host_dispatch_cuda.json``: Transformers' GPT2Block step (forward and
backward, SDPA, tiny tensors: the host sets the pace) and the same step under Transformers' gradient checkpointing.
A host's scales are defined on that step (:func:`dse.estimate.passes.host_dispatch`, hwspecs/hosts/firecracker-*):

    dispatch_scale            = t_step / (L_f d + D_f + L_b d + D_b)
    checkpoint_dispatch_scale = t_step,ckpt / (2 (L_f d + D_f) + L_b d + D_b)

with (L_f, L_b) the launches dse prices for one GPT2Block (20, 50: :func:`gpt2_block_launches`) and d, (D_f, D_b)
the pytorch stack's reference host times per launch and per layer pass (stacks/pytorch.yaml): 538.9 us and
735.3 us on the reference host (:func:`gpt2_block_reference`; 538.4 and 734.8 since the stack's host times were
refitted at that level, rounded: the VMs' 4.580 / 6.474 come out 4.584 / 6.479, 0.1 % off). The measurement with
CUDA tensors holds the CUDA launch and the caching allocator, as the reference prices them; a measurement with CPU
tensors (``--device cpu``, the smoke mode) is set against the reference host's own CPU-tensor step
(data/host_dispatch_cpu.json, 317 us: the same ratio within 2 % on the H200 VM, 4.64 against 4.58), and has no
checkpointed reference.
"""

from __future__ import annotations

import json
from pathlib import Path

from dse.errors import InputError


def gpt2_block_launches() -> tuple[int, int]:
    """The (forward, backward) launches dse prices for one Transformers GPT2Block (SDPA, no K/V cache): (20, 50),
    the count every measured host's scales were set with (hwspecs/hosts/firecracker-xeon-vm*.yaml).

    Counted as :func:`dse.formulas.kernels.table_launches` counts by default, with the layer's tensor-parallel
    collective rows (2 forward, 2 backward): a one-GPU step, as the estimate prices it, launches none of them
    (18, 48). Counting them moves the reference step from 521.4 to 538.9 us; the scales of the two VM hosts
    would be 3.4 % higher without them (4.73 and 4.31). Kept as the hosts' scales were measured."""
    from dse import catalog
    from dse.estimate import make_plan
    from dse.estimate.kernel_table import kernel_tables
    from dse.formulas.kernels import table_launches
    from dse.formulas.precision import recipe_of

    m = catalog.load_model("gpt2-medium", [(["dropout"], 0.0)])
    p = make_plan(m, catalog.load_system("h200-vm"), dict(dp=1, micro_batch=4, global_batch=4, seq_len=1024,
                                                          stack="pytorch", kv_cache=False))
    f, b = table_launches(kernel_tables(m, p, recipe_of(p))["layer"])
    return int(f), int(b)


def gpt2_block_reference(recompute: str = "none") -> float:
    """The reference host's time dse prices for one GPT2Block step [s]: L d + D per pass, the forward twice under
    full recompute (:func:`dse.formulas.kernels.step_host_time`)."""
    from dse.formulas.kernels import step_host_time
    from dse.specs.stack import load as stack_spec

    spec = stack_spec("pytorch")
    return float(step_host_time(gpt2_block_launches(), spec.dispatch, spec.layer_dispatch, recompute))


def _reference_cpu_step() -> float:
    """The reference host's GPT2Block step on CPU tensors [s] (data/host_dispatch_cpu.json)."""
    from dse.catalog import data_dir

    return json.loads((data_dir() / "host_dispatch_cpu.json").read_text())["gpt2_block"]["step_us"] * 1e-6


def host_scales(host: dict, where: str = "host") -> dict[str, float]:
    """``dispatch_scale`` (and ``checkpoint_dispatch_scale`` where the checkpointed step was measured on CUDA) of
    the host that measured ``host`` (a micro row's ``host`` block, or scripts/measure_host.py's output).

    >>> from dse.catalog import data_dir
    >>> vm = json.loads((data_dir() / "h200" / "host_dispatch_cuda.json").read_text())
    >>> {k: round(v, 2) for k, v in host_scales(vm).items()}     # hwspecs/hosts/firecracker-xeon-vm.yaml: 4.58, 6.474
    {'dispatch_scale': 4.58, 'checkpoint_dispatch_scale': 6.48}
    """
    block = host.get("gpt2_block") if isinstance(host, dict) else None
    step = block.get("step_us") if isinstance(block, dict) else None
    if not (isinstance(step, (int, float)) and step > 0):
        raise InputError(f"{where}.gpt2_block.step_us: expected the measured GPT2Block step in us (> 0), got "
                         f"{step!r}")
    if str(host.get("device", "cuda")).lower() == "cpu":
        return {"dispatch_scale": step * 1e-6 / _reference_cpu_step()}
    out = {"dispatch_scale": step * 1e-6 / gpt2_block_reference("none")}
    ckpt = block.get("checkpointed_step_us")
    if isinstance(ckpt, (int, float)) and ckpt > 0:
        out["checkpoint_dispatch_scale"] = ckpt * 1e-6 / gpt2_block_reference("full")
    return out


def read_host(path: str | Path) -> dict | None:
    """The ``host`` block of the last ``kind: micro`` row of a JSONL file that has one (None: none, or a CSV)."""
    p = Path(path)
    if p.suffix.lower() == ".csv" or not p.is_file():
        return None
    found = None
    for line in p.read_text().splitlines():
        try:
            row = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:
            return None              # measurements.read names the bad line
        if isinstance(row, dict) and row.get("kind") == "micro" and isinstance(row.get("host"), dict):
            found = row["host"]
    return found if found is not None and found.get("gpt2_block") else None


def with_host(system, scales: dict[str, float]):
    """``system`` with its host's dispatch scales replaced by ``scales``."""
    import dataclasses

    node = system.node
    return dataclasses.replace(system, node=dataclasses.replace(node, host=dataclasses.replace(node.host, **scales)))
