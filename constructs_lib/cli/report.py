"""Summarise a synthesized cloud assembly: stacks, resources per type, compliance findings."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class AssemblySummary:
    stacks: dict[str, Counter]  # stack name -> resource type -> count
    open_findings: list[str]  # "plugin: rule at construct path"
    acknowledged: dict[str, str]  # "construct path: rule" -> reason


def summarise(outdir: str | Path) -> AssemblySummary:
    out = Path(outdir)
    manifest = json.loads((out / "manifest.json").read_text())
    stacks: dict[str, Counter] = {}
    acknowledged: dict[str, str] = {}
    for name, artifact in sorted(manifest.get("artifacts", {}).items()):
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        template = json.loads((out / artifact["properties"]["templateFile"]).read_text())
        stacks[name] = Counter(r["Type"] for r in template.get("Resources", {}).values())
        metadata_file = out / f"{name}.metadata.json"
        if metadata_file.exists():
            for path, entries in json.loads(metadata_file.read_text()).items():
                for entry in entries:
                    if entry["type"] == "aws:cdk:acknowledged-rules":
                        for rule, reason in entry["data"].items():
                            acknowledged[f"{path}: {rule.removeprefix('Annotation::')}"] = reason
    open_findings = []
    report_file = out / "validation-report.json"
    if report_file.exists():
        for plugin in json.loads(report_file.read_text()).get("pluginReports", []):
            for violation in plugin.get("violations", []):
                for construct in violation.get("violatingConstructs", []):
                    open_findings.append(
                        f"{plugin['pluginName']}: {violation['ruleName']} at {construct['constructPath']}"
                    )
    return AssemblySummary(stacks=stacks, open_findings=open_findings, acknowledged=acknowledged)


def render(summary: AssemblySummary) -> str:
    lines = [f"{len(summary.stacks)} stacks"]
    for name, types in summary.stacks.items():
        lines.append(f"  {name}: {sum(types.values())} resources")
        lines += [f"    {count:3d} {kind}" for kind, count in sorted(types.items())]
    lines.append(f"compliance findings open: {len(summary.open_findings)}")
    lines += [f"  {finding}" for finding in summary.open_findings]
    rules = Counter(key.split(": ", 1)[1].split("[", 1)[0] for key in summary.acknowledged)
    lines.append(f"acknowledged with a reason: {len(summary.acknowledged)} (docs/compliance.md lists each)")
    lines += [f"  {count:3d} {rule}" for rule, count in sorted(rules.items())]
    return "\n".join(lines)
