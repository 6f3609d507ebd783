"""The real AWS CDK CLI (npm aws-cdk, installed into the project by `make cdk-cli`, which
`make test` runs) drives the reference app offline, and produces what `make synth` produces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .assembly_diff import differences
from .org import default_data

ROOT = Path(__file__).resolve().parents[2]
CDK = ROOT / "node_modules" / ".bin" / "cdk"

pytestmark = pytest.mark.slow


def environment() -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "lambda")]),
        # offline and quiet: no version check, no telemetry (notices: --no-notices)
        "CDK_DISABLE_VERSION_CHECK": "true",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
    }
    for variable in ("GPU_GOVERNANCE_CONFIG", "CDK_OUTDIR", "CDK_CONTEXT_JSON"):
        env.pop(variable, None)
    return env


def cdk(*arguments: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    if not CDK.exists():
        pytest.fail(f"{CDK.relative_to(ROOT)} is missing: `make cdk-cli` installs the CDK CLI into the project")
    # cdk.json's own app command: the .venv interpreter `make install` sets up, as a user runs it.
    return subprocess.run(
        [str(CDK), *arguments, "--no-notices"],
        cwd=cwd,
        env=env or environment(),
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def direct_synth(tmp_path_factory) -> Path:
    """The assembly `make synth` writes: app.py run by Python, without the CLI."""
    outdir = tmp_path_factory.mktemp("direct")
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=ROOT,
        env={**environment(), "CDK_OUTDIR": str(outdir)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return outdir


def test_cdk_json_runs_app_py_with_the_interpreter_make_install_sets_up():
    """A fresh clone: `make install` (the README's setup command for the CDK CLI) creates .venv,
    whose interpreter cdk.json's app command names."""
    assert json.loads((ROOT / "cdk.json").read_text())["app"] == ".venv/bin/python app.py"
    assert (
        "VENV := .venv" in (ROOT / "Makefile").read_text()
        and "\ninstall: $(INSTALLED)" in (ROOT / "Makefile").read_text()
    )
    readme = (ROOT / "README.md").read_text()
    assert readme.index("`make install`") < readme.index("npx cdk synth")


def test_cdk_synth_produces_what_make_synth_produces(direct_synth, tmp_path):
    result = cdk("synth", "--quiet", "--output", str(tmp_path / "cli"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "feature flags are not configured" not in result.stderr  # cdk.json sets every recommended flag
    assert differences(direct_synth, tmp_path / "cli") == []  # app.py reads cdk.json's flags too


def test_a_project_from_gpu_governance_init_synthesizes_what_the_reference_does(direct_synth, tmp_path):
    """A platform team's own repository: `gpu-governance init`, then `cdk synth` there with the
    library installed (this interpreter's environment first on PATH, as an activated venv puts
    it; python3 is its Python). Same governance file, same templates, findings and acknowledgements."""
    project = tmp_path / "platform"
    init = subprocess.run(
        [sys.executable, "-m", "constructs_lib.cli", "init", str(project)],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert init.returncode == 0, init.stderr
    env = {**environment(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = cdk("synth", "--quiet", "--output", str(tmp_path / "out"), cwd=project, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "feature flags" not in result.stderr  # neither the CLI's warning nor the app's
    assert differences(direct_synth, tmp_path / "out") == []


def test_cdk_ls_lists_the_reference_stacks(direct_synth, tmp_path):
    result = cdk("ls", "--output", str(tmp_path / "cli"))
    assert result.returncode == 0, result.stderr[-3000:]
    expected = sorted(path.name.removesuffix(".template.json") for path in direct_synth.glob("*.template.json"))
    assert sorted(result.stdout.split()) == expected


def test_bad_governance_file_fails_with_the_one_line_message_and_no_traceback(tmp_path):
    data = default_data()
    data["teams"][0]["account"] = "finance"
    config = tmp_path / "governance.yaml"
    config.write_text(yaml.safe_dump(data))
    result = cdk("synth", "--quiet", "--output", str(tmp_path / "cli"), "-c", f"config={config}")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "teams[0].account: undeclared account ('finance') - one of ['product', 'research']" in output
    assert "Traceback" not in output
    assert not (tmp_path / "cli" / "manifest.json").exists()
