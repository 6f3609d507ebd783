"""Round trips through jsii of one synthesis of a generated organisation (tests/scale/generate.py),
compliance packs included: each request Python sends to the node kernel (create, get, invoke,
...) and each callback node makes into Python (the `GpuGovernance` pack's rules, widgets rendered
in Python). Unlike CPU time the count does not depend on other work on the machine, so before and
after of a change compare exactly; per team is the difference between two sizes.

    python benchmarks/jsii_round_trips.py --teams 20 40
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "lambda")]

from benchmarks.synth_scale import generated_app_environment  # noqa: E402


def count() -> int:
    """In the child: synthesize (app.py's main) and print the messages counted, as JSON."""
    import jsii._kernel as kernel
    from jsii._kernel.providers import process

    counts: collections.Counter[str] = collections.Counter()
    send, handle = process._NodeProcess.send, kernel._handle_callback

    def counting_send(self, request, response_type):
        counts[type(request).__name__] += 1
        return send(self, request, response_type)

    def counting_handle(kernel_, callback):
        counts["callback"] += 1
        return handle(kernel_, callback)

    process._NodeProcess.send = counting_send
    kernel._handle_callback = counting_handle  # looked up by name at each call
    from constructs_lib.deployment.app import main

    code = main()
    print(json.dumps(dict(counts)))
    return code


def measure(teams: int) -> dict[str, int]:
    with tempfile.TemporaryDirectory(prefix="jsii-round-trips-") as tmp:
        env = generated_app_environment(tmp, teams)
        done = subprocess.run(
            [sys.executable, __file__, "--child"], cwd=ROOT, env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise SystemExit(f"{teams} teams: app.py exited {done.returncode}: {done.stderr[-2000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teams", type=int, nargs="+", default=[20, 40])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return count()
    print("| teams | round trips | of which callbacks into Python | creates | per team since the previous row |")
    print("| --- | --- | --- | --- | --- |")
    previous = None
    for teams in args.teams:
        counts = measure(teams)
        # A callback is two messages (node asks, Python answers): counted once, as one round trip.
        total = sum(n for kind, n in counts.items() if kind != "_CompleteRequest")
        per_team = f"{(total - previous[1]) / (teams - previous[0]):.0f}" if previous else ""
        print(f"| {teams} | {total} | {counts.get('callback', 0)} | {counts.get('CreateRequest', 0)} | {per_team} |")
        previous = (teams, total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
