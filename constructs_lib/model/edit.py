"""Change one team's entry in a governance file by editing its text, not by re-dumping the data:
comments, order, quoting and every other team stay byte for byte as they were.

The edit is located with the YAML composer's marks (character offsets into the text), then the
result is parsed and checked as a whole and compared with the intended model before anyone
writes it, so an edit that would change anything else is refused.
"""

from __future__ import annotations

import yaml

from constructs_lib.core.errors import GovernanceError, Problem

from .loader import _StrictLoader, parse_config


def set_team_paused(text: str, team: str, paused: bool, source: str) -> str:
    """``text`` with ``paused`` of team ``team`` set; unchanged when it already says so. A team
    that is not paused needs no ``paused`` key, so resuming one that has none changes nothing."""
    model = parse_config(text, source)  # the file must be valid before it is touched
    names = [t.name for t in model.teams]
    if team not in names:
        raise GovernanceError(
            [Problem(path="team", wrong="no such team in the file", value=team, allowed=f"one of {names}")]
        )
    entry = _team_node(yaml.compose(text, Loader=_StrictLoader), team)
    value = "true" if paused else "false"
    existing = next((v for k, v in entry.value if k.value == "paused"), None)
    if model.teams[names.index(team)].paused == paused:
        edited = text
    elif existing is not None:
        edited = text[: existing.start_mark.index] + value + text[existing.end_mark.index :]
    else:
        edited = _insert_after_name(text, entry, value)
    _check_only_the_pause_changed(model, parse_config(edited, source), team, paused)
    return edited


def _team_node(root: yaml.Node, team: str) -> yaml.MappingNode:
    teams = next(v for k, v in root.value if k.value == "teams")
    for entry in teams.value:
        if any(k.value == "name" and v.value == team for k, v in entry.value):
            return entry
    raise AssertionError(f"team {team} was parsed but not composed")  # parse_config found it


def _insert_after_name(text: str, entry: yaml.MappingNode, value: str) -> str:
    key, name = next((k, v) for k, v in entry.value if k.value == "name")
    if entry.flow_style:  # {name: x, ...} or JSON: a member right after the name
        member = '"paused": ' if key.style == '"' else "paused: "
        return text[: name.end_mark.index] + f", {member}{value}" + text[name.end_mark.index :]
    line_end = text.find("\n", name.end_mark.index)
    line_end = len(text) if line_end < 0 else line_end
    return text[:line_end] + "\n" + " " * key.start_mark.column + f"paused: {value}" + text[line_end:]


def _check_only_the_pause_changed(before, after, team: str, paused: bool) -> None:
    intended = before.model_copy(
        update={"teams": tuple(t.model_copy(update={"paused": paused}) if t.name == team else t for t in before.teams)}
    )
    if after.model_dump() != intended.model_dump():
        raise GovernanceError(
            [
                Problem(
                    path="team",
                    wrong="the file's layout cannot be edited in place",
                    value=team,
                    allowed=f"add `paused: {str(paused).lower()}` to the team by hand",
                )
            ]
        )
