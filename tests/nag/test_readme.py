"""The README's "Governance checks in your pipeline" example runs as it stands, and the pack in
it is live: without its acknowledgement the same example fails on the finding."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.foundation.test_readme import readme_block

ACKNOWLEDGEMENT_CALL = "acknowledge(share, "


def _run(tmp_path, source: str) -> subprocess.CompletedProcess:
    script = tmp_path / "app.py"
    script.write_text(source)
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CDK_OUTDIR": str(tmp_path / "cdk.out")},
    )


def test_example_synthesizes_with_its_acknowledgement(tmp_path):
    result = _run(tmp_path, readme_block("Governance checks in your pipeline"))
    assert result.returncode == 0, result.stderr[-3000:]
    templates = list((tmp_path / "cdk.out" / "assembly-Prod").glob("*.template.json"))
    assert len(templates) == 1, templates
    assert '"BorrowLimit": -1' in templates[0].read_text()


def test_example_without_acknowledgement_fails_on_the_finding(tmp_path):
    source = readme_block("Governance checks in your pipeline")
    lines = source.splitlines()
    kept = [line for line in lines if not line.startswith(ACKNOWLEDGEMENT_CALL)]
    assert len(kept) == len(lines) - 1
    result = _run(tmp_path, "\n".join(kept))
    assert result.returncode != 0
    assert "GpuGovernance-BorrowWithoutLimit" in result.stdout + result.stderr


def test_example_template_is_cfn_lint_clean(tmp_path):
    # a quota-share queue needs a service environment: without it cfn-lint warns (and Batch refuses it)
    from cfnlint.api import lint

    result = _run(tmp_path, readme_block("Governance checks in your pipeline"))
    assert result.returncode == 0, result.stderr[-3000:]
    (template,) = (tmp_path / "cdk.out" / "assembly-Prod").glob("*.template.json")
    assert "AWS::Batch::ServiceEnvironment" in template.read_text()
    assert [str(match) for match in lint(template.read_text(), regions=["us-east-1"])] == []
