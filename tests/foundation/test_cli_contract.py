"""One CLI contract: every command takes the governance file as ``--config FILE`` (or
``--example``), refuses to guess, and ends with exit 0, 1 or 2 and at most a few lines on
stderr, never a traceback: without AWS credentials or a region, on a closed pipe, on Ctrl-C."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from constructs_lib.cli import build_parser, main
from constructs_lib.cli.config import CONFIG_HELP

from .test_cli_imports import COMMANDS, ROOT, offline_commands

CONFIG = str(ROOT / "constructs_lib" / "data" / "default-governance.yaml")


def leaf_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> dict[str, argparse.ArgumentParser]:
    """Every runnable command of the parser, by its words (``team show``)."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(leaf_commands(sub, (*prefix, name)))
    return found or {" ".join(prefix): parser}


def aws_commands(folder: Path) -> dict[str, tuple[list[str], int]]:
    """The commands that call AWS, as a first-time user types them: no region, no credentials."""
    return {
        # the ledger is in the capacity region, which the governance file names: no NoRegionError
        "capacity request": (
            [
                "capacity",
                "request",
                "--config",
                CONFIG,
                "--team",
                "production",
                "--instance-type",
                "ml.p5.48xlarge",
                "--count",
                "2",
                "--hours",
                "8",
                "--table",
                "ledger",
            ],
            1,
        ),
        "capacity requests": (["capacity", "requests", "--table", "ledger"], 1),
        "capacity approve": (["capacity", "approve", "intent-1", "--table", "ledger"], 1),
        "usage report": (["usage", "report", "--config", CONFIG, "--from", "2026-11-01", "--to", "2026-11-02"], 1),
        "status": (["status", "--config", CONFIG, "--team", "research", "--pool", "sagemaker-training"], 1),
    }


AWS_COMMANDS = ("capacity request", "capacity requests", "capacity approve", "usage report", "status")


def no_aws_environment(home: Path) -> dict[str, str]:
    """A shell with no AWS configuration at all (and no instance metadata to fall back on)."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "lambda")]),
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "constructs_lib.cli", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def every_command(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    return {**offline_commands(folder), **aws_commands(folder)}


def test_every_command_is_run(every_command):
    # a new command must be added here, and so run without AWS below
    assert set(every_command) == {*COMMANDS, *AWS_COMMANDS}
    assert set(leaf_commands(build_parser())) - {"trace from-batch", "trace from-kueue"} <= set(every_command)


@pytest.mark.parametrize("name", sorted({*COMMANDS, *AWS_COMMANDS}))
def test_every_command_without_aws_configuration_exits_0_1_or_2_without_a_traceback(every_command, name, tmp_path):
    argv, expected = every_command[name]
    result = run(argv, no_aws_environment(tmp_path))
    assert result.returncode == expected, result.stderr
    assert "Traceback" not in result.stderr
    if expected == 1:  # AWS could not be reached: one line saying what to set up
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_without_a_region_the_capacity_request_uses_the_governance_files(tmp_path):
    argv, _ = aws_commands(tmp_path)["capacity request"]
    result = run(argv, no_aws_environment(tmp_path))
    assert "no AWS credentials" in result.stderr and "region" not in result.stderr


def test_a_command_with_no_region_at_all_says_how_to_give_one(tmp_path):
    result = run(["capacity", "requests", "--table", "ledger"], no_aws_environment(tmp_path))
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == "gpu-governance capacity: AWS could not be reached: no AWS region configured; pass --region or set AWS_REGION"
    )


def config_commands() -> dict[str, argparse.ArgumentParser]:
    return {
        name: sub
        for name, sub in leaf_commands(build_parser()).items()
        if any(a.dest == "config" for a in sub._actions)
    }


FILE_CHANGING = {"team pause", "team resume"}


def test_every_command_that_reads_a_governance_file_takes_it_the_same_way():
    commands = config_commands()
    assert {
        "validate",
        "explain",
        "audit",
        "slurm script",
        "team show",
        "team submit-example",
        "status",
        "usage report",
        "simulate",
        "capacity plan",
        "capacity request",
    } <= set(commands)
    for name, sub in commands.items():
        options = {a.dest: a for a in sub._actions}
        assert options["config"].option_strings == ["--config"] and options["config"].help == CONFIG_HELP, name
        assert options["config"].required is False, name
        if name in FILE_CHANGING:  # they change the file they are given: there is no example to change
            assert "example" not in options, name
        else:
            assert options["example"].option_strings == ["--example"], name


@pytest.mark.parametrize(
    "argv",
    [
        ["validate"],
        ["explain"],
        ["audit"],
        ["slurm", "script", "--pool", "hyperpod-slurm"],
        ["team", "show", "research"],
        ["team", "submit-example", "research", "--backend", "slurm"],
        ["status", "--team", "research"],
        ["usage", "report", "--from", "2026-11-01", "--to", "2026-11-02"],
        ["simulate", "--trace", "t.csv"],
        ["capacity", "plan", "--offerings", "o.json"],
    ],
)
def test_without_a_governance_file_a_command_refuses_instead_of_using_the_example(argv, monkeypatch, capsys):
    monkeypatch.delenv("GPU_GOVERNANCE_CONFIG", raising=False)
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "--config: missing" in error and "--example" in error


def test_the_example_is_used_only_when_asked_and_never_with_a_file(monkeypatch, capsys):
    monkeypatch.delenv("GPU_GOVERNANCE_CONFIG", raising=False)
    assert main(["team", "show", "research", "--example"]) == 0
    assert "research" in capsys.readouterr().out
    assert main(["team", "show", "research", "--example", "--config", CONFIG]) == 2
    assert "either --config FILE or --example" in capsys.readouterr().err


def test_the_old_positional_file_still_works_with_a_warning(capsys):
    assert main(["validate", CONFIG]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("valid:") and f"deprecated; use --config {CONFIG}" in captured.err


def test_a_closed_pipe_ends_quietly(tmp_path):
    # `gpu-governance schema | head -0`: the reader is gone before anything is written
    process = subprocess.Popen(
        [sys.executable, "-m", "constructs_lib.cli", "schema"],
        cwd=ROOT,
        env=no_aws_environment(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    process.stdout.close()
    error = process.stderr.read()
    assert process.wait(timeout=120) == 1
    assert error == ""


def test_ctrl_c_is_one_line(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(sys.modules["constructs_lib.cli.main"], "_schema", interrupted)
    assert main(["schema"]) == 1
    assert capsys.readouterr().err == "gpu-governance schema: interrupted\n"


def test_version_is_the_installed_distributions(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out == f"gpu-governance {version('cdk-gpu-governance')}\n"


def test_status_help_says_what_json_prints(tmp_path, capsys):
    (status,) = (sub for name, sub in leaf_commands(build_parser()).items() if name == "status")
    (json_option,) = (a for a in status._actions if a.dest == "json")
    squeue = tmp_path / "squeue.txt"
    squeue.write_text("7|train|research|research.standard|PENDING|1|research|100|2026-12-01T09:00:00|Resources\n")
    assert (
        main(
            ["status", "--example", "--team", "research", "--pool", "hyperpod-slurm", "--squeue", str(squeue), "--json"]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert isinstance(printed, list) and [p["pool"] for p in printed] == ["hyperpod-slurm"]
    assert "JSON list" in json_option.help
