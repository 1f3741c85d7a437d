"""Drive wear: the ``endurance`` section, from the writes every technique puts on the node's drives.

Storage offload (optimizer states, gradients, parameters on ``nvme``/``csd``) and activation
offload (``ssd``) record what they write per iteration as typed contributions
(``c["terms"].drive_writes``: technique name -> :class:`~dse.estimate.terms.DriveWrites`). This
technique runs after both and turns their sum into the section at the final iteration time. A
plan that writes nothing to drives has no ``endurance`` section: its drives do not wear (the
search reads that as an unlimited lifetime).
"""

from __future__ import annotations

from typing import Any

from dse.estimate.technique import TechniqueBase
from dse.estimate.terms import gpus_per_host


def drive_endurance(c: dict[str, Any], device: Any, by_source: dict[str, Any], per_drive: Any, gpus_node: Any,
                    F: Any = None) -> None:
    """Set ``c["endurance"]``: drive wear at the current iteration time, from the bytes written per iteration.

    ``by_source``: bytes the node's drives absorb per iteration, by what writes them; ``per_drive``: bytes
    per iteration on the most written drive. Write amplification 1 (large sequential writes). Uses the
    endurance formulas of :mod:`dse.formulas.activation_offload` (TBW = capacity x DWPD x 365 x warranty
    years; years = TBW / (rate x seconds per year)). Array-safe.
    """
    if F and "activation_offload" in F:
        A = F["activation_offload"]
    else:                              # imported here: a plan that writes no drive never needs these formulas
        from dse.formulas import activation_offload as A
    node = sum(by_source.values())
    rate = per_drive / c["time"]["iteration"]
    tbw = A.rated_endurance(device.capacity, device.dwpd, device.warranty_years)
    c["endurance"] = {
        "drive": device.name,
        "bytes_written_per_iteration": node,
        "bytes_written_per_iteration_per_gpu": node / gpus_node,
        "bytes_written_per_iteration_per_drive": per_drive,
        "bytes_written_per_iteration_by_source": dict(by_source),
        "write_rate_per_drive": rate,
        "rated_endurance_per_drive": tbw,
        "lifetime_years": A.lifetime_years(tbw, rate),
    }


def apply_wear(c: dict[str, Any], system: Any, F: Any = None) -> None:
    """The ``endurance`` section from every drive-write contribution so far (none: no section)."""
    writes = c["terms"].drive_writes
    if not writes or system.node.storage is None:
        return
    by_source: dict[str, Any] = {}
    per_drive = 0.0
    for w in writes.values():      # registry order: storage offload, then activation offload
        by_source.update(w.by_source)
        per_drive = per_drive + w.per_drive
    gpus_node = gpus_per_host(c, system)
    drive_endurance(c, system.node.storage.device, by_source, per_drive, gpus_node, F)


class DriveWear(TechniqueBase):
    """Drive wear (``endurance``) from the techniques' drive writes (see the module docstring)."""

    name = "drive_wear"
    sections = ("endurance",)
    after = ("storage_offload", "activation_offload")

    def active(self, plan: Any) -> bool:
        return plan.offload_optimizer in ("nvme", "csd") or plan.offload_params == "nvme" \
            or plan.offload_activations == "ssd"

    def apply_time(self, c: dict[str, Any], state: Any, model: Any, system: Any, plan: Any, F: Any = None) -> None:
        apply_wear(c, system, F)


TECHNIQUE = DriveWear()
