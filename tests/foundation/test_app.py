"""app.py as the CDK CLI runs it: context from CDK_CONTEXT_JSON, output to CDK_OUTDIR."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .org import default_data
from .test_cli import hostile_files

ROOT = Path(__file__).resolve().parents[2]


def run_app(tmp_path, config_data):
    config = tmp_path / "governance.yaml"
    config.write_text(yaml.safe_dump(config_data))
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps({"config": str(config)}), "CDK_OUTDIR": str(tmp_path / "out")}
    env.pop("GPU_GOVERNANCE_CONFIG", None)
    return subprocess.run(
        [sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def test_config_from_cdk_context_is_synthesized(tmp_path):
    data = default_data()
    data["organisation"] = "smallco"
    result = run_app(tmp_path, data)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "out" / "smallco-capacity.template.json").exists()


def test_invalid_config_exits_2_without_traceback_or_output(tmp_path):
    data = default_data()
    data["teams"][0]["account"] = "finance"
    result = run_app(tmp_path, data)
    assert result.returncode == 2
    assert "teams[0].account: undeclared account ('finance')" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


def run_app_from_environment(tmp_path, config: str):
    env = {**os.environ, "GPU_GOVERNANCE_CONFIG": config, "CDK_OUTDIR": str(tmp_path / "out")}
    env.pop("CDK_CONTEXT_JSON", None)
    return subprocess.run(
        [sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize("name", ["unhashable-key", "boolean-key", "deeply-nested", "full-width-account", "endless"])
def test_hostile_files_exit_2_with_the_usual_message(tmp_path, name):
    path = hostile_files(tmp_path)[name]
    result = run_app_from_environment(tmp_path, path)
    assert result.returncode == 2, result.stderr[-2000:]
    header, problem = result.stderr.strip().splitlines()
    assert header == "invalid governance configuration:"
    assert problem.startswith(("capacity_account.account_id: invalid", f"{path}: "))
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("spelling", ["CONFIG", "GPU_GOVERNANCE_CONFIG"])
def test_make_synth_builds_the_named_file_in_either_spelling(tmp_path, spelling):
    # A bad file must stop `make synth`, never be swapped for the built-in example. The Makefile
    # runs in a scratch folder (it removes ./cdk.out) with this interpreter's environment.
    for name in ("Makefile", "app.py", "cdk.json", "pyproject.toml"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / ".installed-cdk").touch()  # newer than pyproject.toml: nothing to install
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 2\n")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("CONFIG", "GPU_GOVERNANCE_CONFIG", "CDK_CONTEXT_JSON")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "lambda")])
    command = ["make", "--no-print-directory", "synth", f"BIN={Path(sys.executable).parent}"]
    if spelling == "CONFIG":
        command.append(f"CONFIG={bad}")
    else:
        env["GPU_GOVERNANCE_CONFIG"] = str(bad)
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode != 0
    assert "invalid governance configuration:\nversion: invalid (2) - allowed: 1" in result.stderr
    assert not (tmp_path / "cdk.out" / "manifest.json").exists()


def test_the_installed_packages_app_prints_no_jsii_banner_and_names_unset_feature_flags(tmp_path):
    """`python -m constructs_lib.deployment` (docs/delivery.md) in a folder whose cdk.json sets no
    feature flags, without the JSII_ settings: main silences jsii before aws_cdk starts (the
    package's __init__ used to import it first), and says that the templates would differ."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JSII_") and k != "GPU_GOVERNANCE_CONFIG"}
    env |= {
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "lambda")]),
        "CDK_CONTEXT_JSON": json.dumps({"config": str(tmp_path / "missing.yaml")}),
        "CDK_OUTDIR": str(tmp_path / "out"),
    }
    (tmp_path / "cdk.json").write_text(json.dumps({"app": "python -m constructs_lib.deployment"}))
    result = subprocess.run(
        [sys.executable, "-m", "constructs_lib.deployment"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "!!" not in result.stdout + result.stderr and "Node 20" not in result.stderr
    warning, header, problem = result.stderr.strip().splitlines()
    assert warning.startswith("warning: 89 of the library's recommended CDK feature flags are not set")
    assert "`gpu-governance init` writes a cdk.json with them" in warning
    assert header == "invalid governance configuration:" and "missing.yaml: cannot read the file" in problem


def test_make_synth_installs_the_cdk_extra_only_and_make_test_adds_the_test_tools(tmp_path):
    """Issue 41 item 4: on a fresh clone `make synth` built the whole test environment (5 min 30 s,
    1.2 GB); the [cdk] extra alone is what it needs. `make -n` in a scratch folder without a venv
    prints what each target would install."""
    for name in ("Makefile", "pyproject.toml"):
        (tmp_path / name).symlink_to(ROOT / name)

    def installs(target: str) -> list[str]:
        result = subprocess.run(
            ["make", "--no-print-directory", "-n", target], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        return [line.split("-e ")[1] for line in result.stdout.splitlines() if "pip install --quiet -e" in line]

    assert installs("synth") == ['".[cdk]"']
    assert installs("test") == ['".[cdk]"', '".[cdk,test]"']  # the second only adds the test tools
