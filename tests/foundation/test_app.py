"""app.py as the CDK CLI runs it: context from CDK_CONTEXT_JSON, output to CDK_OUTDIR."""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from .org import default_data

ROOT = Path(__file__).resolve().parents[2]


def run_app(tmp_path, config_data):
    config = tmp_path / "governance.yaml"
    config.write_text(yaml.safe_dump(config_data))
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps({"config": str(config)}), "CDK_OUTDIR": str(tmp_path / "out")}
    env.pop("GPU_GOVERNANCE_CONFIG", None)
    return subprocess.run([sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


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
