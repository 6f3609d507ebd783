"""Commands that synthesize nothing start without aws_cdk and jsii (about 2 s of imports), and
importing the package changes nothing in the environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

OPENB_POD_LIST = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
pod-ls,12000,16384,1,1000,,LS,Running,0,500,10
pod-be,6000,12288,1,460,,BE,Failed,5,105,5
"""


def offline_commands(folder: Path) -> dict[str, tuple[list[str], int]]:
    """Every command that synthesizes nothing, as a command line and its expected exit code, with
    the inputs it needs written into ``folder``; benchmarks/cli_startup.py times the same lines."""
    trace = folder / "trace.csv"
    trace.write_text(
        "job_id,team,submit_time,duration,instance_type,count,priority,checkpointable\n"
        "j1,research,0,600,ml.p5.48xlarge,1,10,true\n"
    )
    openb = folder / "openb.csv"
    openb.write_text(OPENB_POD_LIST)
    sacct = folder / "sacct.txt"
    sacct.write_text(
        "JobID|Account|QOS|Submit|Start|End|NNodes|TimelimitRaw|State\n"
        "1|research|research.low|2026-12-01T00:00:00|2026-12-01T00:00:01|2026-12-01T01:00:01|1|60|COMPLETED\n"
    )
    offerings = folder / "offerings.json"
    offerings.write_text(json.dumps({"CapacityBlockOfferings": []}))
    config = str(ROOT / "constructs_lib" / "data" / "default-governance.yaml")
    squeue = folder / "squeue.txt"
    squeue.write_text("7|train|research|research.standard|PENDING|1|research|100|2026-12-01T09:00:00|Resources\n")
    return {
        "validate": (["validate", "--example"], 0),
        "example": (["example"], 0),
        "init": (["init", str(folder / "new-project"), "--force"], 0),  # --force: the benchmark runs it again
        "schema": (["schema"], 0),
        "explain": (["explain", "--example"], 0),
        "simulate": (
            ["simulate", "--config", config, "--trace", str(trace), "--pool", "sagemaker-training", "--json"],
            0,
        ),
        "openb-trace": (["openb-trace", str(openb), str(folder / "openb-trace.csv")], 0),
        "trace from-sacct": (
            ["trace", "from-sacct", str(sacct), str(folder / "sacct-trace.csv"), "--instance-type", "ml.p5.48xlarge"],
            0,
        ),
        "capacity plan": (
            ["capacity", "plan", "--config", config, "--offerings", str(offerings), "--now", "2026-12-01T09:00:00Z"],
            0,
        ),
        # refused before any AWS call (no ledger table named): the imports are what is checked
        "capacity approve": (["capacity", "approve", "intent-1"], 2),
        "slurm script": (["slurm", "script", "--example", "--pool", "hyperpod-slurm"], 0),
        "team submit-example": (
            ["team", "submit-example", "research", "--backend", "hyperpod_eks", "--image", "img:1", "--config", config],
            0,
        ),
        "report": (["report", str(folder / "no-cloud-assembly")], 2),
        "team show": (["team", "show", "research", "--config", config, "--json"], 0),
        "status": (
            ["status", "--team", "research", "--pool", "hyperpod-slurm", "--squeue", str(squeue), "--config", config],
            0,
        ),
        "audit": (["audit", "--config", str(ROOT / "examples" / "org-projects.yaml"), "--json"], 0),
        # refused before the file is written (no such team): the imports are what is checked
        "team pause": (["team", "pause", "ghost", "--config", config], 2),
        "team resume": (["team", "resume", "ghost", "--config", config], 2),
        # refused before any AWS call (--to before --from): the imports (boto3 included) are what is checked
        "usage report": (["usage", "report", "--from", "2026-12-01", "--to", "2026-11-01"], 2),
    }


# Runs one command in a fresh interpreter and reports, on the last line, its exit code, which of
# the heavy modules it loaded and whether the environment changed.
PROBE = """
import json, os, sys
before = dict(os.environ)
from constructs_lib.cli import main
code = main(json.loads(sys.argv[1]))
loaded = sorted(m for m in ("aws_cdk", "jsii", "constructs", "cdk_nag") if m in sys.modules)
print("\\n" + json.dumps({"code": code, "loaded": loaded, "environ_changed": dict(os.environ) != before}))
"""


def clean_environment() -> dict[str, str]:
    """No jsii settings (so a change to them would show) and no governance defaults."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("JSII_") and k not in ("GPU_GOVERNANCE_CONFIG", "GPU_GOVERNANCE_CAPACITY_TABLE")
    }
    return {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "lambda")])}


def probe(argv: list[str]) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv)],
        cwd=ROOT,
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def commands(tmp_path_factory):
    return offline_commands(tmp_path_factory.mktemp("inputs"))


COMMANDS = (
    "validate",
    "example",
    "init",
    "schema",
    "explain",
    "simulate",
    "openb-trace",
    "trace from-sacct",
    "capacity plan",
    "capacity approve",
    "slurm script",
    "report",
    "team show",
    "team pause",
    "team resume",
    "team submit-example",
    "status",
    "audit",
    "usage report",
)


def test_every_command_is_probed(commands):
    from constructs_lib.cli import build_parser

    (subcommands,) = (action for action in build_parser()._actions if action.dest == "command")
    assert set(commands) == set(COMMANDS)
    assert {name.split()[0] for name in COMMANDS} == set(subcommands.choices)


@pytest.mark.parametrize("name", COMMANDS)
def test_command_that_synthesizes_nothing_imports_no_cdk(commands, name):
    argv, expected_code = commands[name]
    outcome = probe(argv)
    assert outcome["code"] == expected_code
    assert outcome["loaded"] == []
    assert not outcome["environ_changed"]


def test_package_import_sets_no_environment_variable_and_loads_no_cdk():
    code = (
        "import json, os, sys; before = dict(os.environ); import constructs_lib; "
        "print(json.dumps([dict(os.environ) == before, 'aws_cdk' in sys.modules, 'jsii' in sys.modules]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=clean_environment(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == [True, False, False]
