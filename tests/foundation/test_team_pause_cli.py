"""`gpu-governance team pause|resume TEAM --config FILE` changes that team's entry only (issue 28)."""

from __future__ import annotations

import difflib
import json

import pytest
import yaml

from constructs_lib.cli import main
from constructs_lib.model.loader import default_config_text, load_model

from .org import default_data


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def changed_lines(before: str, after: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_pause_adds_one_line_to_the_team_keeping_every_comment_and_resume_turns_it_off(capsys, tmp_path):
    path = tmp_path / "governance.yaml"
    original = default_config_text()
    path.write_text(original)
    code, out, _ = run(capsys, "team", "pause", "research", "--config", str(path))
    assert code == 0 and "team research is now paused" in out
    paused = path.read_text()
    assert changed_lines(original, paused) == ["+    paused: true"]
    assert [t.name for t in load_model(str(path)).teams if t.paused] == ["research"]
    code, out, _ = run(capsys, "team", "pause", "research", "--config", str(path))
    assert code == 0 and "already paused" in out and path.read_text() == paused  # a repeated pause is a no-op
    code, _, _ = run(capsys, "team", "resume", "research", "--config", str(path))
    assert code == 0 and changed_lines(original, path.read_text()) == ["+    paused: false"]
    assert not any(t.paused for t in load_model(str(path)).teams)


def test_pause_in_a_flow_mapping_and_in_json(capsys, tmp_path):
    data = default_data()
    flow = tmp_path / "flow.yaml"
    rest = {key: value for key, value in data.items() if key != "teams"}
    flow.write_text(yaml.safe_dump(rest) + "teams:\n" + "".join(f"- {json.dumps(team)}\n" for team in data["teams"]))
    assert run(capsys, "team", "pause", "training", "--config", str(flow))[0] == 0
    assert [t.name for t in load_model(str(flow)).teams if t.paused] == ["training"]
    as_json = tmp_path / "governance.json"
    as_json.write_text(json.dumps(data, indent=2))
    assert run(capsys, "team", "pause", "production", "--config", str(as_json))[0] == 0
    assert json.loads(as_json.read_text())["teams"][2]["paused"] is True


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["team", "pause", "ghost"],
            "team: no such team in the file ('ghost') - one of ['research', 'training', 'production']",
        ),
        (["team", "resume", "research"], None),
    ],
)
def test_bad_input_is_refused_with_exit_2_and_the_file_untouched(capsys, tmp_path, argv, message):
    path = tmp_path / "governance.yaml"
    path.write_text(default_config_text())
    if message is None:  # no file named at all: nothing to change
        code, _, err = run(capsys, *argv)
        assert code == 2 and "--config: no governance file to change" in err and "Traceback" not in err
        return
    code, _, err = run(capsys, *argv, "--config", str(path))
    assert code == 2 and message in err and "Traceback" not in err
    assert path.read_text() == default_config_text()
