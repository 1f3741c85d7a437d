"""dse: analytical cost model and design-space exploration for training LLMs on memory-constrained systems."""

__version__ = "0.1.0"


def estimate(model, hardware, plan=None, **kwargs):
    """Estimate one training scenario; see :func:`dse.estimate.estimate`."""
    from dse.estimate import estimate as _estimate

    return _estimate(model, hardware, plan, **kwargs)
