"""Fit the vTrain A100 cluster's host launch floor: the provenance of ``dispatch_scale`` in
hwspecs/hosts/vtrain-a100-host.yaml.

``dse calibrate --params dispatch_scale`` (dse.calibrate.fit: scipy least_squares, soft_l1 loss, 5-fold
cross-validation) over the 1,440 single-node Megatron-DeepSpeed runs of data/megatron_a100_single_node_times.csv
(dse.validate.megatron_single), on the system they ran on with the GPU efficiencies fitted on the multi-node runs.
Starts from the shipped value; prints the fit as JSON (about a minute on one core).

Usage:  python scripts/fit_vtrain_host.py [--folds 5] [--every 1]
"""

from __future__ import annotations

import argparse
import json

from dse.validate.megatron_single import calibration


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--every", type=int, default=1, help="fit every n-th run (1: all)")
    args = ap.parse_args()
    r = calibration(folds=args.folds, every=args.every)
    r.pop("points_table")
    print(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
