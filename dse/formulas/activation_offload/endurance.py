"""Drive capacity and endurance: bytes held and written per GPU, rated TBW, years until worn out.

Part of :mod:`dse.formulas.activation_offload` (notation and symbols there); research note
activation_offload.md §1.6.
"""

from __future__ import annotations

from dse.formulas._array import Num, maximum
from dse.formulas.cost import SECONDS_PER_YEAR

__all__ = ["DAYS_PER_YEAR", "ssd_capacity_needed", "bytes_written_per_iteration", "rated_endurance", "lifetime_years"]

#: Days per year in drive ratings: TBW = capacity x DWPD x 365 x warranty years.
DAYS_PER_YEAR = 365


def ssd_capacity_needed(in_flight: Num, written_per_micro_batch: Num) -> Num:
    """Drive bytes one GPU needs for the activations of every micro-batch in flight.

    Formula: C = n_fl W_mb, W_mb = k A_off minus forwarded bytes
    Source: Narayanan et al. 2021 (arXiv 2104.04473) §2.2 (1F1B keeps p micro-batches in flight on the first
    stage); FlashTrain pipeline_tensor_cache.py keeps one tensor cache per in-flight micro-batch.

    Returns:
        bytes [bytes]

    >>> ssd_capacity_needed(4, 13.3e9) / 1e9   # GB
    53.2
    """
    return in_flight * written_per_micro_batch


def bytes_written_per_iteration(micro_batches: Num, written_per_micro_batch: Num,
                                write_amplification: Num = 1.0) -> Num:
    """Bytes the drives absorb per iteration (per GPU) including the drive's write amplification.

    Formula: W_iter = WAF m W_mb
    Source: research note activation_offload.md §1.6; WAF = 1 for large sequential file writes (default).

    Args:
        micro_batches: m, micro-batches per iteration [count]
        write_amplification: WAF, flash writes / host writes [1]
    Returns:
        bytes [bytes]

    >>> bytes_written_per_iteration(8, 13.3e9) / 1e9   # GB
    106.4
    """
    return write_amplification * micro_batches * written_per_micro_batch


def rated_endurance(capacity: Num, dwpd: Num, warranty_years: Num) -> Num:
    """Bytes a drive is rated to absorb over its warranty (TBW).

    Formula: TBW = capacity x DWPD x 365 x warranty years
    Source: drive-writes-per-day rating (vendor datasheets); research note activation_offload.md §1.6
    (P5800X 1.6 TB, 100 DWPD, 5 years: 292 PB).

    Args:
        capacity: drive capacity [bytes]
        dwpd: rated drive writes per day [1/day]
        warranty_years: warranty period [years]
    Returns:
        bytes [bytes]

    >>> rated_endurance(1.6e12, 100, 5) / 1e15   # Optane P5800X 1.6 TB, PB
    292.0
    """
    return capacity * dwpd * DAYS_PER_YEAR * warranty_years


def lifetime_years(endurance_bytes: Num, write_rate: Num) -> Num:
    """Years until a drive reaches its rated endurance when written at a sustained average rate.

    Formula: years = TBW / (rate x 3.156e7 s)
    Source: research note activation_offload.md §1.6 (292 PB at 3 GB/s: 3.1 years).

    A rate below 1e-30 B/s counts as 1e-30 (no writes: about 1e40 years, i.e. never).

    Args:
        endurance_bytes: TBW [bytes]
        write_rate: sustained average write rate [bytes/s]
    Returns:
        years [years]

    >>> round(lifetime_years(292e15, 3e9), 2)   # P5800X at a sustained 3 GB/s
    3.08
    >>> import numpy as np
    >>> np.round(lifetime_years(292e15, np.array([1e9, 3e9, 5e9])), 2)   # note §1.6: 9.3 / 3.1 / 1.85 years
    array([9.25, 3.08, 1.85])
    """
    return endurance_bytes / (maximum(write_rate, 1e-30) * SECONDS_PER_YEAR)
