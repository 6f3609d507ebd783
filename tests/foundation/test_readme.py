"""The README's first python block under "Use in your own CDK app" runs as it stands."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_block(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split(f"## {heading}", 1)[1]
    return re.search(r"```python(?: \w+)?\n(.*?)```", section, re.S).group(1)


def test_use_in_your_own_cdk_app_runs(tmp_path):
    script = tmp_path / "app.py"
    script.write_text(readme_block("Use in your own CDK app"))
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CDK_OUTDIR": str(tmp_path / "cdk.out")},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    template = (tmp_path / "cdk.out" / "GpuQueues.template.json").read_text()
    assert '"QuotaShareName": "research"' in template
    assert "quota-share/research" in template
