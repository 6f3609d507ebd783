"""Compare two synthesized cloud assemblies: what a change that should change nothing deployed
did change.

    python tests/foundation/assembly_diff.py BEFORE_CDK_OUT AFTER_CDK_OUT [--runtime-moved]

Templates are compared whole (logical ids, properties, asset hashes); acknowledgements (kept in
the assembly's metadata, not in the templates) per construct path, in order; the compliance
packs' findings by rule and construct, open or acknowledged. Exit 0 when all are identical.

``--runtime-moved``: for a change that moves modules of the Lambda runtime, which changes every
runtime asset's hash and nothing else. Each runtime asset (a directory holding
``gpu_governance_runtime``) is named in the templates by what it carries beside the package (the
policy document and other documents the library compiled), not by its hash, so the templates must
be equal modulo those hashes; every other asset must keep its hash. Each side's runtime assets must
carry one and the same package, holding every Lambda handler its templates name.
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

RUNTIME = "gpu_governance_runtime"


def templates(outdir: Path, runtime_moved: bool = False) -> dict[str, Any]:
    names = runtime_asset_names(outdir) if runtime_moved else {}
    found = {}
    for path in sorted(outdir.glob("*.template.json")):
        text = path.read_text()
        for asset_hash, name in names.items():
            text = text.replace(asset_hash, name)
        found[path.name] = json.loads(text)
    return found


def _files(directory: Path) -> dict[str, str]:
    """Each file under ``directory`` (relative path) -> the SHA-256 of its bytes."""
    return {
        path.relative_to(directory).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def _package_and_documents(asset: Path) -> tuple[dict[str, str], dict[str, str]]:
    """A runtime asset's package files, and the documents the library added beside them (those
    that are not the source's, i.e. not Python)."""
    files = _files(asset)
    documents = {name: digest for name, digest in files.items() if not name.endswith(".py")}
    return {name: digest for name, digest in files.items() if name not in documents}, documents


def runtime_assets(outdir: Path) -> list[Path]:
    return [path for path in sorted(outdir.glob("asset.*")) if (path / RUNTIME).is_dir()]


def runtime_asset_names(outdir: Path) -> dict[str, str]:
    """Each runtime asset's hash -> a name made of what it carries beside the package."""
    names = {}
    for asset in runtime_assets(outdir):
        _, documents = _package_and_documents(asset)
        carried = hashlib.sha256(json.dumps(documents, sort_keys=True).encode()).hexdigest()[:16]
        names[asset.name.removeprefix("asset.")] = f"runtime-asset-{carried}"
    return names


def runtime_problems(outdir: Path, side: str) -> list[str]:
    """Where the runtime assets of one assembly do not carry one package with every handler named."""
    assets = runtime_assets(outdir)
    if not assets:
        return [f"{side}: no runtime asset"]
    packages = {json.dumps(_package_and_documents(asset)[0], sort_keys=True) for asset in assets}
    lines = [f"{side}: the runtime assets carry {len(packages)} different packages"] if len(packages) > 1 else []
    for name, template in templates(outdir).items():
        for logical_id, resource in template.get("Resources", {}).items():
            handler = (
                resource.get("Properties", {}).get("Handler", "")
                if resource.get("Type") == "AWS::Lambda::Function"
                else ""
            )
            if not handler.startswith(f"{RUNTIME}."):
                continue
            module, _, function = handler.rpartition(".")
            source = assets[0] / (module.replace(".", "/") + ".py")
            defined = source.is_file() and any(
                isinstance(node, ast.FunctionDef) and node.name == function
                for node in ast.parse(source.read_text()).body
            )
            if not defined:
                lines.append(f"{side}: template {name}: {logical_id}'s handler {handler} is not in its asset")
    return lines


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


def differences(before: Path, after: Path, runtime_moved: bool = False) -> list[str]:
    lines = runtime_problems(before, "before") + runtime_problems(after, "after") if runtime_moved else []
    old, new = templates(before, runtime_moved), templates(after, runtime_moved)
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
    runtime_moved = "--runtime-moved" in sys.argv[3:]
    lines = differences(before, after, runtime_moved)
    print(
        "\n".join(lines)
        if lines
        else ("identical modulo runtime asset hashes" if runtime_moved else "identical")
        + f": {len(templates(after))} templates, "
        + (f"{len(runtime_assets(after))} runtime assets, " if runtime_moved else "")
        + f"{sum(map(len, acknowledgements(after).values()))} acknowledgements, {len(findings(after))} findings"
    )
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
