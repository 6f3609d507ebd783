"""docs/delivery.md's pipeline example runs as written from outside the repository, with nothing
but the package: no `stacks` import (the reference stacks are constructs_lib.deployment's), in a
directory holding only its governance file. Also `python -m constructs_lib.deployment`, the CDK
app an installed package runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.foundation.org import default_data

ROOT = Path(__file__).resolve().parents[2]
# The repository is on the path only for the package itself; `stacks` and `app` are made unimportable.
WITHOUT_THE_REPOSITORY = "import sys\nsys.modules['stacks'] = None\nsys.modules['app'] = None\n"

pytestmark = pytest.mark.slow


def example() -> str:
    text = (ROOT / "docs" / "delivery.md").read_text()
    (code,) = [
        block
        for block in re.findall(r"^```python(?: \w+)?\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
        if "GovernancePipelineStack(" in block
    ]
    return code


def run(tmp_path: Path, code: str, **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "governance.yaml").write_text(yaml.safe_dump(default_data()))
    (tmp_path / "script.py").write_text(WITHOUT_THE_REPOSITORY + code)
    environment = {
        k: v for k, v in os.environ.items() if k not in ("GPU_GOVERNANCE_CONFIG", "CDK_OUTDIR", "CDK_CONTEXT_JSON")
    }
    environment |= {"PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'lambda'}", **env}
    return subprocess.run(
        [sys.executable, "script.py"], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=900
    )


def test_the_pipeline_example_synthesizes_from_the_package_alone(tmp_path):
    result = run(tmp_path, example(), CDK_OUTDIR="cdk.out")  # as `cdk synth` runs it
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "cdk.out" / "manifest.json").read_text())
    stages = {name for name, artifact in manifest["artifacts"].items() if artifact["type"] == "cdk:cloud-assembly"}
    assert {"assembly-gpu-governance-delivery-Capacity", "assembly-gpu-governance-delivery-Consumer-research"} <= stages
    capacity = json.loads(
        (tmp_path / "cdk.out" / "assembly-gpu-governance-delivery-Capacity" / "manifest.json").read_text()
    )
    assert any(
        artifact.get("displayName", "").endswith("acme-ml-capacity") for artifact in capacity["artifacts"].values()
    )


def test_the_packaged_app_synthesizes_the_organisation_of_a_governance_file(tmp_path):
    code = "import runpy\nrunpy.run_module('constructs_lib.deployment', run_name='__main__')\n"
    result = run(tmp_path, code, CDK_CONTEXT_JSON=json.dumps({"config": "governance.yaml"}), CDK_OUTDIR="out")
    assert result.returncode == 0, result.stderr[-3000:]
    stacks = sorted(path.name.removesuffix(".template.json") for path in (tmp_path / "out").glob("*.template.json"))
    assert stacks == ["acme-ml-capacity", "acme-ml-consumer-product", "acme-ml-consumer-research"]
