"""Stand-ins for the tools the member's guide runs (aws, kubectl, sbatch, squeue, scancel), so its
commands run as written against the reference organisation, with no cloud and no cluster.

Each refuses what the real service would refuse as far as can be known offline: the AWS CLI
checks every call against botocore's service model (a SubmitServiceJob payload also against
SageMaker's CreateTrainingJob), kubectl checks manifests against the Kubernetes schema and the
admission policies the library ships, and sbatch checks account, partition and QoS against the
Slurm plan. Every call is appended to ``$FAKE_LOG`` as one JSON line.

    python -m tests.member.fake_cli TOOL ARGS...
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.member.aws_models import operation, payload_problems, problems

TOOLS = ("aws", "kubectl", "sbatch", "squeue", "scancel")
_AWS_GLOBAL = {"--region", "--output", "--query", "--profile"}


def fail(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(255 if message.startswith("aws") else 1)


def log(tool: str, **call: Any) -> None:
    with open(os.environ["FAKE_LOG"], "a", encoding="utf-8") as stream:
        stream.write(json.dumps({"tool": tool, **call}) + "\n")


def _read(path: str) -> str:
    return Path(path.removeprefix("file://")).read_text(encoding="utf-8")


def _value(shape, text: str) -> Any:
    """An AWS CLI argument as the CLI would parse it: numbers, JSON, or shorthand ``a=b,c=d``."""
    if shape.type_name == "integer":
        return int(text)
    if shape.type_name in ("structure", "list", "map"):
        if text.lstrip().startswith(("{", "[")):
            return json.loads(text)
        item = dict(pair.split("=", 1) for pair in text.split(","))
        if shape.type_name == "list":
            member = shape.member
            return [{k: ([v] if member.members[k].type_name == "list" else v) for k, v in item.items()}]
        return item
    return text


def aws(args: list[str]) -> None:
    words, index = [], 0
    options: dict[str, str] = {}
    while index < len(args):
        if args[index] in _AWS_GLOBAL:
            options[args[index]] = args[index + 1]
            index += 2
        else:
            words.append(args[index])
            index += 1
    service, command, rest = words[0], words[1], words[2:]
    if (service, command) == ("eks", "update-kubeconfig"):  # an AWS CLI command, not an API: it calls DescribeCluster
        command = "describe-cluster"
    name = "".join(part.capitalize() for part in command.split("-"))
    try:
        model = operation(service, name)
    except Exception as error:  # noqa: BLE001 - the real CLI says "Invalid choice"
        fail(f"aws: invalid choice {service} {command}: {error}")
    members = {member.lower(): member for member in model.input_shape.members}
    params: dict[str, Any] = {}
    pairs = iter(rest)
    for flag in pairs:
        value = next(pairs, None)
        if flag == "--cli-input-json":
            params.update(json.loads(_read(value)) if value.startswith("file://") else json.loads(value))
            continue
        member = members.get(flag.removeprefix("--").replace("-", ""))
        if member is None or value is None:
            fail(f"aws: unknown option {flag} for {service} {command}")
        params[member] = _value(model.input_shape.members[member], value)
    report = problems(service, name, params)
    if report:
        fail(f"aws: {report}")
    text = json.dumps(params)
    if "${" in text or "<" in text:
        fail(f"aws: an unfilled placeholder in {text}")
    log("aws", service=service, operation=name, params=params, options=options)
    if name == "SubmitServiceJob":
        report = payload_problems(params)
        if report:
            fail(f"aws: serviceRequestPayload: {report}")
        print(
            json.dumps(
                {
                    "jobArn": f"arn:aws:batch:us-east-1:111122223333:service-job/{params['jobName']}",
                    "jobName": params["jobName"],
                    "jobId": "a1b2c3d4-0000-0000-0000-000000000001",
                }
            )
        )
    elif name == "GetParameter":
        # FAKE_PARAMETERS: the published parameters, name -> value; any other name does not exist.
        published = json.loads(Path(os.environ["FAKE_PARAMETERS"]).read_text(encoding="utf-8"))
        if params["Name"] not in published:
            fail(
                f"aws: An error occurred (ParameterNotFound) when calling the GetParameter operation: {params['Name']}"
            )
        value = published[params["Name"]]
        print(
            value
            if options.get("--query") == "Parameter.Value"
            else json.dumps({"Parameter": {"Name": params["Name"], "Value": value}})
        )
    else:
        print("{}")


def kubectl(args: list[str]) -> None:
    import kubernetes_validate

    from tests.member.shipped_cluster import admission_for, namespace_of

    verb = args[0]
    if "-f" in args:
        documents = [d for d in yaml.safe_load_all(_read(args[args.index("-f") + 1])) if d]
        for manifest in documents:
            kubernetes_validate.validate(manifest, "1.33", strict=True)
            namespace = manifest["metadata"].get("namespace", "")
            denials = admission_for(namespace).review(manifest, namespace) if verb in ("apply", "create") else []
            if denials:
                fail(f"kubectl: admission webhook denied the request: {denials}")
            log("kubectl", verb=verb, manifest=manifest)
            print(
                f"{manifest['kind'].lower()}.{manifest['apiVersion'].split('/')[0]}/{manifest['metadata']['name']} {verb}d"
            )
        return
    namespace = args[args.index("-n") + 1] if "-n" in args else ""
    namespace_of(namespace)  # a team's namespace, or refused
    log("kubectl", verb=verb, args=args)


def sbatch(args: list[str]) -> None:
    from tests.member.shipped_cluster import slurm_refusal

    flags = dict(re.fullmatch(r"--([a-z-]+)=(.*)", a).groups() for a in args if a.startswith("--"))
    refusal = slurm_refusal(flags.get("account"), flags.get("partition"), flags.get("qos"), os.environ.get("USER", ""))
    if refusal:
        fail(f"sbatch: error: {refusal}")
    log("sbatch", flags=flags, script=[a for a in args if not a.startswith("--")])
    print("Submitted batch job 42")


def simple(tool: str, args: list[str]) -> None:
    log(tool, args=args)


if __name__ == "__main__":
    tool, arguments = sys.argv[1], sys.argv[2:]
    {"aws": aws, "kubectl": kubectl, "sbatch": sbatch}.get(tool, lambda a: simple(tool, a))(arguments)
