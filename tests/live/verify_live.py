"""``make verify-live``: what no offline test can show, probed in a sandbox capacity account.

Each probe checks one row of the register of AWS behaviour (docs/aws-behaviour.md) that no page
proves. Dry by default: it prints every probe, what it would do, when it passes and its cost
bound, and calls nothing. With ``--act`` it runs them, each undoing what it made, and prints one
line per probe and one per register row. Run it as a principal that may assume the teams' roles
(and, for the probes that say so, change the sandbox's quota shares, HyperPod compute quota and
block compute environment, create a role, and run ``kubectl`` through its kubeconfig):

    python -m tests.live.verify_live --queue sagemaker-training --team-a research --team-b training \\
        --image <training image URI> --instance-type ml.g6e.12xlarge --output s3://<team A bucket>/verify-live/ \\
        [--act] [--only <probe or row> ...]

Exit codes (tests/live/framework.py): 0 every probe passed, or a dry run; 1 a probe failed;
2 a wrong command line; 3 a probe was inconclusive and none failed; 4 an undo step failed (a job
may still run, a share, quota or compute environment may still be changed: the lines marked
CLEANUP say which). docs/security.md
says what each row's failure means and what to do.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from tests.live import framework, probes


def parser(catalogue: framework.Catalogue) -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    result.add_argument("--act", action="store_true", help="run the probes (default: print what they would do)")
    result.add_argument("--only", nargs="+", default=[], metavar="NAME", help="probes or register rows to run")
    result.add_argument("--region", help="the sandbox capacity account's region (default: the session's)")
    for option in catalogue.options:
        result.add_argument(option.flag, type=option.type, default=option.default, help=option.help)
    return result


def aws_context(args: argparse.Namespace) -> framework.Context:
    """Clients as the caller, or as a role it assumes (credentials kept per role)."""
    import boto3

    session = boto3.Session(region_name=args.region)
    account = session.client("sts").get_caller_identity()["Account"]
    sessions: dict[str | None, Any] = {None: session}

    def client(service: str, role: str | None) -> Any:
        if role not in sessions:
            credentials = session.client("sts").assume_role(RoleArn=role, RoleSessionName="gpu-governance-verify-live")[
                "Credentials"
            ]
            sessions[role] = boto3.Session(
                aws_access_key_id=credentials["AccessKeyId"],
                aws_secret_access_key=credentials["SecretAccessKey"],
                aws_session_token=credentials["SessionToken"],
                region_name=session.region_name,
            )
        return sessions[role].client(service)

    return framework.Context(
        args=args,
        account=account,
        partition=session.get_partition_for_region(session.region_name),
        region=session.region_name,
        client=client,
    )


def main(argv: list[str] | None = None, *, out: TextIO = sys.stdout, context=aws_context) -> int:
    catalogue = framework.discover(probes)
    args = parser(catalogue).parse_args(argv)
    try:
        selected = framework.select(catalogue, args.only)
    except ValueError as error:
        print(error, file=sys.stderr)
        return framework.EXIT_USAGE
    if not args.act:
        return framework.plan(selected, args, out)
    return framework.summary(framework.act(selected, context(args), out), out)


if __name__ == "__main__":
    sys.exit(main())
