"""Every code block of README.md and docs/*.md is run, checked, or tagged as needing what this
machine has not, so that no doc command goes silently unrun (docs/team-guide.md has its own,
fuller test: tests/member/test_team_guide.py).

The convention: a fence says its language and, where a reader would run it, a tag.

* ```sh test`` / ```console test`` - runs offline in bash, in a folder holding the reference
  governance file as ``governance.yaml`` (the platform team's file) and the repository's
  ``examples/`` and ``benchmarks/``; ``gpu-governance`` and ``python`` are this checkout's. In a
  ``console`` block the ``$ `` lines are the commands and every other line is output that must be
  printed (``...`` stands for anything).
* ```sh synopsis`` - usage lines with placeholders (FILE, [--json]): every command path exists
  and every ``--option`` is one that command takes.
* ```sh live`` / ```console live`` - needs an AWS account, credentials, a cluster or the internet.
* ```sh slow`` - minutes of work (benchmarks, test suites, a local Slurm cluster, `make synth`:
  the CDK CLI part is tests/foundation/test_cdk_cli.py).
* ```python test`` - a whole script: runs in that folder. ```python app`` - a CDK app run by the
  test named in APPS. ```python fragment`` - code inside someone's stack (``self``, ``model``):
  compiled, every name it takes from constructs_lib exists, and every keyword it passes one of
  them is a parameter of it.
* ```yaml governance`` - a whole governance file, loaded with the library's loader.
  ```yaml fragment`` - part of one, merged into the reference example and loaded: in a
  top-level list of named items (pools, teams, capacity_windows, ...) an item updates the
  example's item of the same name field by field, an item of a new name is appended; any other
  top-level key replaces the example's. Elide with a comment (``# ...``), not YAML's ``...``.
* ```json`` - parsed. ```text`` - output or messages, not commands.

Every ``gpu-governance`` command a page shows - in any block, whatever its tag, or inline in the
text - must name commands and options the CLI has, and every ``make`` target it names must exist.

Any other fence (no language, a language without a tag where one is needed) fails the test.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from constructs_lib.model.loader import default_config_text, dump_yaml, parse_config

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "team-guide.md")]
FENCE = re.compile(r"^( *)```(\S*)(?: (\S+))?\n(.*?)^\1```$", re.MULTILINE | re.DOTALL)
TAGS = {
    "sh": {"test", "synopsis", "live", "slow"},
    "console": {"test", "live", "slow"},
    "python": {"test", "app", "fragment"},
    "yaml": {"governance", "fragment"},
    "json": {None},
    "text": {None},
}
# The CDK apps of the docs, each run by its own test (they synthesize; run once there, not here).
APPS = {
    ("README.md", "from constructs_lib import BatchQuotaSharePool"): "tests/foundation/test_readme.py",
    ("delivery.md", "GovernancePipelineStack("): "tests/pipeline/test_delivery_example.py",
}


def _dedent(body: str, indent: str) -> str:
    return "".join(line.removeprefix(indent) for line in body.splitlines(keepends=True))


def doc_blocks() -> list[tuple[str, str, str | None, str]]:
    """(where, language, tag, body) of every fenced block."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            indent, language, tag, body = match.groups()
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{page.relative_to(ROOT)}:{line}", language, tag, _dedent(body, indent)))
    return found


def blocks(language: str, tag: str | None) -> list[tuple[str, str]]:
    return [(where, body) for where, lang, t, body in doc_blocks() if (lang, t) == (language, tag)]


def ids(found: list[tuple[str, str]]) -> list[str]:
    return [where for where, _ in found]


def test_every_block_is_tagged():
    wrong = [
        f"{where}: ```{language} {tag or ''}".rstrip()
        for where, language, tag, _ in doc_blocks()
        if tag not in TAGS.get(language, ())
    ]
    assert wrong == [], "tag these blocks (see this module's docstring):\n" + "\n".join(wrong)


def test_every_fence_is_parsed():
    # A fence the pattern misses (unbalanced, odd indentation) would escape every check.
    for page in PAGES:
        opening = sum(1 for line in page.read_text().splitlines() if line.lstrip().startswith("```"))
        assert opening == 2 * sum(1 for where, *_ in doc_blocks() if where.startswith(f"{page.relative_to(ROOT)}:")), (
            page
        )


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    place = tmp_path_factory.mktemp("docs")
    tools = place / ".bin"
    tools.mkdir()
    for name, line in {
        "gpu-governance": f'exec "{sys.executable}" -m constructs_lib.cli "$@"',
        "python": f'exec "{sys.executable}" "$@"',
    }.items():
        (tools / name).write_text(f"#!/bin/sh\n{line}\n")
        (tools / name).chmod(0o755)
    for shared in ("examples", "benchmarks"):
        (place / shared).symlink_to(ROOT / shared)
    (place / "governance.yaml").write_text(default_config_text())
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_GOVERNANCE_CONFIG", "CDK_OUTDIR", "CDK_CONTEXT_JSON")}
    env |= {"PATH": f"{tools}:{os.environ['PATH']}", "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'lambda'}"}
    return place, env


def bash(script: str, folder: tuple[Path, dict[str, str]]) -> subprocess.CompletedProcess:
    place, env = folder
    return subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script], cwd=place, env=env, capture_output=True, text=True, timeout=300
    )


RUNNABLE = [
    (where, language, body)
    for where, language, tag, body in doc_blocks()
    if language in ("sh", "console") and tag == "test"
]


def session(language: str, body: str) -> tuple[str, list[str]]:
    """The commands and the output lines the doc shows: in a console block the ``$`` lines (and
    their continuations) are commands, in a sh block every line is."""
    if language == "sh":
        return body, []
    commands, output, continued = [], [], False
    for line in body.splitlines():
        if line.startswith("$ ") or continued:
            commands.append(line.removeprefix("$ "))
            continued = line.endswith("\\")
        elif line.strip():
            output.append(line.strip())
    return "\n".join(commands), output


@pytest.mark.parametrize(("where", "language", "body"), RUNNABLE, ids=[where for where, *_ in RUNNABLE])
def test_command_block_runs_and_prints_what_the_doc_shows(where, language, body, folder):
    commands, output = session(language, body)
    result = bash(commands, folder)
    assert result.returncode == 0, f"{where}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    printed = [line.strip() for line in result.stdout.splitlines()]
    for expected in output:
        pattern = re.compile(".*".join(re.escape(part) for part in expected.split("...")))
        assert any(pattern.fullmatch(line) for line in printed), (
            f"{where}: not printed: {expected}\n{result.stdout[-2000:]}"
        )


def synopsis_lines(body: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", body)
    return [line.split("  #", 1)[0].strip() for line in joined.splitlines() if line.strip()]


def option_problems(line: str) -> list[str]:
    from constructs_lib.cli.main import build_parser

    words = shlex.split(line)
    assert words[0] == "gpu-governance", line
    parsers, rest = [build_parser()], words[1:]
    while rest:
        choices = [action.choices for p in parsers for action in p._actions if isinstance(action.choices, dict)]
        names = rest[0].split("|")
        if not choices or names[0] not in choices[0]:
            break
        missing = [name for name in names if name not in choices[0]]
        if missing:
            return [f"{line}: no command {missing}"]
        parsers, rest = [choices[0][name] for name in names], rest[1:]
    options = {re.sub(r"[\[\]].*|=.*", "", word.strip("[]")) for word in words if word.lstrip("[").startswith("--")}
    return [
        f"{line}: {' '.join(words[: len(words) - len(rest)])} takes no {option}"
        for option in sorted(options)
        for p in parsers
        if option not in p._option_string_actions
    ]


@pytest.mark.parametrize(("where", "body"), blocks("sh", "synopsis"), ids=ids(blocks("sh", "synopsis")))
def test_synopsis_names_real_commands_and_options(where, body):
    problems = [problem for line in synopsis_lines(body) for problem in option_problems(line)]
    assert problems == [], f"{where}: {problems}"


# Live and slow blocks are not run, but the gpu-governance commands they show are held to the CLI.
SHOWN = [
    (where, line)
    for where, language, tag, body in doc_blocks()
    if language in ("sh", "console") and tag != "synopsis"
    for line in synopsis_lines(session(language, body)[0])
    if line.startswith("gpu-governance ")
]


@pytest.mark.parametrize(("where", "line"), SHOWN, ids=[f"{where} {line[:40]}" for where, line in SHOWN])
def test_every_gpu_governance_command_shown_names_real_commands_and_options(where, line):
    assert option_problems(line) == [], where


def test_every_gpu_governance_command_in_the_text_names_real_commands_and_options():
    # `gpu-governance ...` in running text, the team guide's included.
    inline = [
        (page.name, span)
        for page in [*PAGES, ROOT / "docs" / "team-guide.md"]
        for span in re.findall(r"`(gpu-governance [^`]*)`", page.read_text())
    ]
    assert len(inline) > 20
    assert [problem for page, span in inline for problem in option_problems(span)] == []


def test_the_option_checker_refuses_what_the_cli_does_not_have():
    assert option_problems("gpu-governance status --team T --nonsense") != []
    assert option_problems("gpu-governance trace from-sacct|from-nothing F O") != []
    assert option_problems("gpu-governance usage report --config F [--format md|csv|json]") == []


@pytest.mark.parametrize(("where", "body"), blocks("python", "test"), ids=ids(blocks("python", "test")))
def test_python_block_runs(where, body, folder, tmp_path):
    _, env = folder
    (tmp_path / "governance.yaml").write_text(default_config_text())
    (tmp_path / "script.py").write_text(body)
    result = subprocess.run(
        [sys.executable, "script.py"],
        cwd=tmp_path,
        env={**env, "CDK_OUTDIR": str(tmp_path / "cdk.out")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"{where}\n{result.stderr[-3000:]}"


def test_every_cdk_app_block_is_run_by_its_test():
    apps = blocks("python", "app")
    covered = {
        where: test
        for where, body in apps
        for (page, marker), test in APPS.items()
        if where.split(":")[0].endswith(page) and marker in body
    }
    assert set(covered) == set(ids(apps)) and len(covered) == len(APPS), (ids(apps), covered)
    for test in covered.values():
        assert (ROOT / test).exists(), test


@pytest.mark.parametrize(("where", "body"), blocks("python", "fragment"), ids=ids(blocks("python", "fragment")))
def test_python_fragment_uses_the_library_as_it_is(where, body):
    import constructs_lib

    tree = ast.parse(body, filename=where)
    # `slurm = HyperPodSlurmGovernance(...)`: what the fragment then reads or calls on `slurm` must exist.
    made = {
        target.id: getattr(constructs_lib, node.value.func.id)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and hasattr(constructs_lib, node.value.func.id)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "constructs_lib":
            problems += [
                f"constructs_lib has no {alias.name}" for alias in node.names if not hasattr(constructs_lib, alias.name)
            ]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in made:
            made_by = made[node.value.id]
            sources = [inspect.getsource(c) for c in made_by.__mro__ if c.__module__.startswith("constructs_lib")]
            if not hasattr(made_by, node.attr) and not any(
                re.search(rf"self\.{node.attr}\s*[:=,]", source) for source in sources
            ):
                problems.append(f"{made_by.__name__} has no {node.attr}")
        if isinstance(node, ast.Call):
            called = None
            if isinstance(node.func, ast.Name) and hasattr(constructs_lib, node.func.id):
                called = getattr(constructs_lib, node.func.id)
            elif (
                isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in made
            ):
                called = getattr(made[node.func.value.id], node.func.attr, None)
            if called is None:
                continue
            parameters = inspect.signature(called).parameters
            if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
                problems += [
                    f"{ast.unparse(node.func)}() takes no {k.arg}="
                    for k in node.keywords
                    if k.arg and k.arg not in parameters
                ]
    assert problems == [], f"{where}: {problems}"


def merged_into_example(fragment: dict) -> dict:
    data = yaml.safe_load(default_config_text())
    for key, value in fragment.items():
        existing = data.get(key)
        if (
            isinstance(value, list)
            and isinstance(existing, list)
            and all(isinstance(item, dict) and "name" in item for item in value)
        ):
            by_name = {item["name"]: item for item in value}
            data[key] = [item | by_name.pop(item.get("name"), {}) for item in existing] + list(by_name.values())
        else:
            data[key] = value
    return data


@pytest.mark.parametrize(("where", "body"), blocks("yaml", "governance"), ids=ids(blocks("yaml", "governance")))
def test_governance_file_loads(where, body):
    parse_config(body, where)


@pytest.mark.parametrize(("where", "body"), blocks("yaml", "fragment"), ids=ids(blocks("yaml", "fragment")))
def test_governance_fragment_loads_in_the_example(where, body):
    parse_config(dump_yaml(merged_into_example(yaml.safe_load(body))), where)


@pytest.mark.parametrize(("where", "body"), blocks("json", None), ids=ids(blocks("json", None)))
def test_json_block_parses(where, body):
    assert isinstance(json.loads(body), dict), where


def test_every_make_target_the_docs_name_exists():
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    named = {
        target
        for page in [*PAGES, ROOT / "docs" / "team-guide.md"]
        for target in re.findall(r"(?:^|`)make ([a-z][\w-]*)", page.read_text(), re.MULTILINE)
    }
    assert {"synth", "test"} <= named and named - targets == set()
