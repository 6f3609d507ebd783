"""Compare two synthesized cloud assemblies: what a change that should change nothing deployed
did change.

    python tests/foundation/assembly_diff.py BEFORE_CDK_OUT AFTER_CDK_OUT

Templates are compared whole (logical ids, properties, asset hashes); acknowledgements (kept in
the assembly's metadata, not in the templates) per construct path, in order; the compliance
packs' findings by rule and construct, open or acknowledged. Exit 0 when all are identical.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def templates(outdir: Path) -> dict[str, Any]:
    return {path.name: json.loads(path.read_text()) for path in sorted(outdir.glob("*.template.json"))}


def acknowledgements(outdir: Path) -> dict[str, list[tuple[str, str]]]:
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(outdir.glob("*.metadata.json")):
        for construct, entries in json.loads(path.read_text()).items():
            for entry in entries:
                if entry.get("type") == "aws:cdk:acknowledged-rules":
                    found.setdefault(construct, []).extend(entry["data"].items())
    return found


def findings(outdir: Path) -> set[tuple[str, str, str, str]]:
    report = outdir / "validation-report.json"
    if not report.exists():
        return set()
    result = set()
    for plugin in json.loads(report.read_text())["pluginReports"]:
        for state in ("violations", "suppressedViolations"):
            for violation in plugin.get(state, []):
                for construct in violation["violatingConstructs"]:
                    result.add((state, plugin["pluginName"], violation["ruleName"], construct["constructPath"]))
    return result


def differences(before: Path, after: Path) -> list[str]:
    lines = []
    old, new = templates(before), templates(after)
    for name in sorted(old.keys() | new.keys()):
        if name not in old or name not in new:
            lines.append(f"template {name}: only {'after' if name in new else 'before'}")
            continue
        old_resources, new_resources = old[name].get("Resources", {}), new[name].get("Resources", {})
        for logical_id in sorted(old_resources.keys() | new_resources.keys()):
            if old_resources.get(logical_id) != new_resources.get(logical_id):
                lines.append(
                    f"template {name}: resource {logical_id} "
                    f"{'added' if logical_id not in old_resources else 'removed' if logical_id not in new_resources else 'changed'}"
                )
        for section in sorted((old[name].keys() | new[name].keys()) - {"Resources"}):
            if old[name].get(section) != new[name].get(section):
                lines.append(f"template {name}: section {section} changed")
    old_acks, new_acks = acknowledgements(before), acknowledgements(after)
    for construct in sorted(old_acks.keys() | new_acks.keys()):
        was, now = old_acks.get(construct, []), new_acks.get(construct, [])
        if was == now:
            continue
        removed = [rule for rule, _ in was if (rule, dict(was)[rule]) not in now]
        added = [rule for rule, _ in now if (rule, dict(now)[rule]) not in was]
        lines.append(
            f"acknowledgements {construct}: "
            + (f"removed {removed} " if removed else "")
            + (f"added {added}" if added else "")
            + ("" if removed or added else "reordered")
        )
    old_findings, new_findings = findings(before), findings(after)
    lines += [f"finding only before: {f}" for f in sorted(old_findings - new_findings)]
    lines += [f"finding only after: {f}" for f in sorted(new_findings - old_findings)]
    return lines


def main() -> int:
    before, after = map(Path, sys.argv[1:3])
    lines = differences(before, after)
    print(
        "\n".join(lines)
        if lines
        else f"identical: {len(templates(after))} templates, "
        f"{sum(map(len, acknowledgements(after).values()))} acknowledgements, {len(findings(after))} findings"
    )
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
