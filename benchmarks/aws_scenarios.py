"""The reclaim controller on the AWS model for a simulated month, faults injected at every Batch
call boundary, invariants checked after every step (tests/aws_model/scenario.py):
`PYTHONPATH=.:lambda python benchmarks/aws_scenarios.py [days]`.

One-minute ticks on a 16-instance Batch fair-share pool shared by a borrowing and a lending
team; the ledger is moto's DynamoDB. Prints what happened and simulated days per minute of wall
time. Figures go to docs/performance.md.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

from tests.aws_model import scenario  # noqa: E402


def main(days: float) -> None:
    started = time.perf_counter()
    report = scenario.run(days=days, seed=2026)
    seconds = time.perf_counter() - started
    print(f"{days:g} simulated days, {report.ticks} ticks, {report.submitted} jobs submitted, {report.preempted} preemptions, "
          f"{report.copies} copies, faults {dict(report.faults)}, {report.crashes} crashed ticks: every invariant held")
    print(f"{seconds:.0f} s wall, {days / (seconds / 60):.2f} simulated days per minute")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 30.0)
