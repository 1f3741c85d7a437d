"""The shared H100 file (``data/h100_hf_training.jsonl``) on the machine kind that measured it: ``h100-vm``.

:mod:`.h100_hf` compares the file's 16 Transformers steps on the shipped ``dgx-h100``, as issue 14's acceptance
asks: a DGX's host, whose launch price is this VM's measured 4.17x the stacks' reference rate, transferred (a DGX
H100's Xeon is of the same generation; its checkpointed scale is the stack's 1.40 x 4.17 = 5.84, not the VM's
measured 5.81). The file was measured on one H100 in this workplace's Firecracker VM (PyTorch 2.11 +
CUDA 13.0, as the lent H100 machine runs; the file does not name its host), whose host is measured to be 4.2x
slower on a GPT2Block step (5.8x under checkpointing: ``data/h100/host_dispatch_cuda.json``,
``hwspecs/hosts/firecracker-xeon-vm-h100.yaml``).
This suite prices the same cases with that host as measured (its checkpointed scale too). Same plan mapping,
quantities, targets and tolerances; nothing is fitted to the cases.
"""

from __future__ import annotations

from dse.validate.h100_hf import (
    _STACK,
    SOURCE,
    TARGETS as TARGETS,  # the suite's aggregate targets (re-exported)
    measured_cases,
    measurements,
)

SYSTEM = "h100-vm"
_HOST = ("the host floor prices a layer pass as its launches x 14.3 us + 534 us forward, 713 us backward (the "
         "stack's reference host times, 3.42 us a launch and 128 / 171 us a pass, x the VM's 4.17, measured on a tiny "
         "GPT2Block step; x 5.81 checkpointed): a host-bound configuration's own step may differ")


#: The time rows outside the tolerance on this host (tests/test_h100_hf_vm.py checks the list is exactly those).
EXPECTED_TIME_MISSES = frozenset({"gpt2-medium sdpa b4 s1024 rc-none"})


def cases():
    def cause(m):
        return f"{_STACK}: {_HOST}" if m.name in EXPECTED_TIME_MISSES else ""

    return measured_cases(measurements(), SYSTEM, SOURCE + "; priced on h100-vm (its measured host)", cause)
