"""Plan rules of chiplet packages (Hecaton): the fields a package takes and the GPU-system ones it refuses. Read
with the other tables of :mod:`dse.specs.rules` (which re-exports :data:`CHIPLET_RULES`)."""

from __future__ import annotations

from dse.specs.rule import Rule


def _mesh(p, s):
    from dse.specs.chiplet import plan_mesh

    return plan_mesh(p, s)


def _first(pairs) -> str:
    """The first ``flag value`` of (flag, value, allowed) whose value is not the allowed one."""
    return next(f"{flag} {value}" for flag, value, allowed in pairs if value != allowed)


def _storage_flags(p):
    return (("--offload-optimizer", p.offload_optimizer, "gpu"), ("--offload-params", p.offload_params, "gpu"),
            ("--gradient-compression", p.gradient_compression, 1.0), ("--ssds", p.ssds, None))


CHIPLET_RULES = (
    Rule("mesh does not have the package's dies", ("chiplet_mesh", "hardware.rows", "hardware.cols"),
         ok=lambda p, m, s: _mesh(p, s)[0] * _mesh(p, s)[1] == s.dies,
         message=lambda p, m, s: "--mesh {0}x{1} has {2} dies; the package {3} has {4} ({5}x{6}); use a layout with "
                                 "{4} dies".format(*_mesh(p, s), _mesh(p, s)[0] * _mesh(p, s)[1], s.name, s.dies,
                                                   s.rows, s.cols)),
    Rule("summa-2d needs a square mesh", ("chiplet_scheme", "chiplet_mesh"),
         when=lambda p, m, s: p.chiplet_scheme == "summa-2d", ok=lambda p, m, s: _mesh(p, s)[0] == _mesh(p, s)[1],
         message=lambda p, m, s: "--chiplet-scheme summa-2d needs a square mesh (q x q), got {}x{}; use megatron-1d or "
                                 "hecaton-2d, or a square --mesh".format(*_mesh(p, s))),
    Rule("tp, pp, dp must be 1 on a chiplet package", ("tp", "pp", "dp", "cp"),
         ok=lambda p, m, s: (p.tp == 1) & (p.pp == 1) & (p.dp == 1) & (p.cp == 1),
         message=lambda p, m, s: _first((("--tp", p.tp, 1), ("--pp", p.pp, 1), ("--dp", p.dp, 1), ("--cp", p.cp, 1)))
                                 + " does not apply to a chiplet package; its dies are split by --chiplet-scheme and "
                                   "--mesh (one package, tp = pp = dp = 1)"),
    Rule("ep must be 1 on a chiplet package", ("ep", "etp"),
         ok=lambda p, m, s: (p.ep == 1) & (p.etp == 1),
         message=lambda p, m, s: _first((("--ep", p.ep, 1), ("--etp", p.etp, 1))) + " does not apply to a chiplet "
                                 "package (expert parallelism is modelled on GPU systems; allowed: 1)"),
    Rule("ZeRO does not apply to a chiplet package", ("zero",),
         ok=lambda p, m, s: p.zero == 0,
         message=lambda p, m, s: f"--zero {p.zero} does not apply to a chiplet package (one package holds every "
                                 "state)"),
    Rule("storage offload on a chiplet package",
         ("offload_optimizer", "offload_params", "gradient_compression", "ssds"),
         ok=lambda p, m, s: (p.offload_optimizer == "gpu" and p.offload_params == "gpu" and p.ssds is None)
                            & (p.gradient_compression == 1.0),
         message=lambda p, m, s: _first(_storage_flags(p)) + " does not apply to a chiplet package (it has no host or "
                                 "drives; its training state lives in the package's DRAM)"),
    Rule("the chiplet model needs flash attention", ("attention",),
         ok=lambda p, m, s: p.attention == "flash",
         message=lambda p, m, s: f"the chiplet model assumes fused (flash) attention; --attention {p.attention} "
                                 "is not modelled"),
    Rule("micro-batch does not divide the global batch", ("micro_batch", "global_batch"),
         when=lambda p, m, s: p.global_batch is not None, ok=lambda p, m, s: p.global_batch % p.micro_batch == 0,
         message=lambda p, m, s: f"--micro-batch {p.micro_batch} does not divide --global-batch {p.global_batch}"),
    Rule("chiplet_minibatch does not divide the micro-batches", ("chiplet_minibatch", "global_batch", "micro_batch"),
         when=lambda p, m, s: p.chiplet_minibatch is not None and p.global_batch is not None,
         ok=lambda p, m, s: (p.global_batch // p.micro_batch) % p.chiplet_minibatch == 0,
         message=lambda p, m, s: f"plan.chiplet_minibatch {p.chiplet_minibatch} does not divide the "
                                 f"{p.global_batch // p.micro_batch} micro-batches of an iteration "
                                 "(global batch / micro-batch)"),
)
