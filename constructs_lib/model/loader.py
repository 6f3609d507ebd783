"""Read a governance file (YAML or JSON) into a checked :class:`GovernanceModel`."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.model import GovernanceModel

MAX_FILE_BYTES = 1024 * 1024  # a governance file is a few KB; refuse anything absurd
CONFIG_ENVIRONMENT_VARIABLE = "GPU_GOVERNANCE_CONFIG"
DEFAULT_CONFIG_NAME = "default-governance.yaml"


MAX_NESTING = 32  # a governance file nests about six levels; deeper input only costs recursion


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML without aliases (no billion-laughs expansion), without duplicate keys (YAML
    would silently keep the last one), with text keys only (`on:` is a boolean in YAML 1.1, and
    a list cannot be a key) and a bounded nesting depth (composing recurses per level)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.MarkedYAMLError(
                problem="YAML aliases are not supported", problem_mark=event.start_mark, note="repeat the value instead"
            )
        if self._depth >= MAX_NESTING:
            raise yaml.MarkedYAMLError(
                problem=f"nested more than {MAX_NESTING} levels deep",
                problem_mark=self.peek_event().start_mark,
                note="a governance file nests a few levels",
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                raise yaml.MarkedYAMLError(
                    problem=f"the key {key!r} is not text"
                    if key_node.id == "scalar"
                    else f"a {key_node.id} is used as a key",
                    problem_mark=key_node.start_mark,
                    note='write keys as text; quote them ("on", "1")',
                )
            if key in seen:
                raise yaml.MarkedYAMLError(
                    problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark, note="each key may appear once"
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _AliasFreeDumper(yaml.SafeDumper):
    """Writes an object used twice in full both times: no ``&id001`` anchors, which
    :class:`_StrictLoader` (and a reader of the YAML) would have to resolve."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(data: Any) -> str:
    """YAML that this module's own loader reads back: keys in their given order, no aliases."""
    return yaml.dump(data, Dumper=_AliasFreeDumper, sort_keys=False)


def default_config_text() -> str:
    """The built-in reference organisation (what `gpu-governance example` prints)."""
    return resources.files("constructs_lib").joinpath("data", DEFAULT_CONFIG_NAME).read_text()


def parse_config(text: str, source: str) -> GovernanceModel:
    """Parse and check governance text; every problem raises as one GovernanceError."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - _StrictLoader is a SafeLoader
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        reason = "; ".join(
            str(part) for part in (getattr(error, "problem", None), getattr(error, "note", None)) if part
        )
        raise GovernanceError(
            [
                Problem(
                    path=source,
                    wrong=f"not valid YAML: {reason or error}",
                    value=where,
                    allowed="a YAML or JSON mapping",
                )
            ]
        ) from None
    if data is None:
        raise GovernanceError(
            [
                Problem(
                    path=source,
                    wrong="the file is empty",
                    value="",
                    allowed="a governance mapping; see `gpu-governance example`",
                )
            ]
        )
    return GovernanceModel.from_dict(data)


def load_model(path: str | os.PathLike[str] | None = None) -> GovernanceModel:
    """Load ``path``, else ``$GPU_GOVERNANCE_CONFIG``, else the built-in default organisation."""
    chosen = path or os.environ.get(CONFIG_ENVIRONMENT_VARIABLE) or None
    if chosen is None:
        return parse_config(default_config_text(), f"<built-in {DEFAULT_CONFIG_NAME}>")
    file = Path(chosen)
    try:
        # Read at most one byte past the limit: st_size says 0 for /dev/zero or a pipe.
        with file.open("rb") as stream:
            raw = stream.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise GovernanceError(
                [
                    Problem(
                        path=str(file),
                        wrong="file too large",
                        value=f"more than {MAX_FILE_BYTES} bytes",
                        allowed=f"at most {MAX_FILE_BYTES} bytes",
                    )
                ]
            )
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise GovernanceError(
            [
                Problem(
                    path=str(file),
                    wrong="cannot read the file",
                    value=type(error).__name__,
                    allowed=f"a readable UTF-8 file ({error})",
                )
            ]
        ) from None
    return parse_config(text, str(file))
