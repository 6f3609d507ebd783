"""`gpu-governance init` (issue 41): a platform team's own project with the reference's app and
feature flags; it refuses a folder that holds anything unless told. That the project synthesizes
exactly what the reference does, through the CDK CLI: tests/foundation/test_cdk_cli.py."""

from __future__ import annotations

import json
from pathlib import Path

from constructs_lib.cli import main
from constructs_lib.cli.init import APP_TEXT, cdk_json
from constructs_lib.deployment.app import recommended_feature_flags
from constructs_lib.model.loader import default_config_text, load_model

ROOT = Path(__file__).resolve().parents[2]


def test_init_writes_the_governance_file_the_app_and_a_cdk_json_with_the_recommended_flags(tmp_path, capsys):
    folder = tmp_path / "platform"
    assert main(["init", str(folder)]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["app.py", "cdk.json", "governance.yaml"]
    assert (folder / "governance.yaml").read_text() == default_config_text()
    load_model(folder / "governance.yaml")  # valid as written
    assert (folder / "app.py").read_text() == APP_TEXT
    written = json.loads((folder / "cdk.json").read_text())
    assert written["app"] == "python3 app.py"
    assert written["context"] == {"config": "governance.yaml", **recommended_feature_flags()}
    assert "gpu-governance validate --config" in capsys.readouterr().out


def test_the_reference_repository_is_what_init_writes():
    """One app and one set of flags: the repository's app.py is init's, and its cdk.json sets the
    flags the package ships, no more and no fewer."""
    assert (ROOT / "app.py").read_text() == APP_TEXT
    reference = json.loads((ROOT / "cdk.json").read_text())
    assert reference["context"] == recommended_feature_flags()
    assert {k: v for k, v in cdk_json().items() if k not in ("app", "context")} == {
        k: v for k, v in reference.items() if k not in ("app", "context", "watch")
    }


def test_init_refuses_a_folder_that_is_not_empty_unless_forced(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["init", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"FOLDER: {tmp_path} is not empty ('notes.txt') - an empty folder, or --force" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # nothing written
    assert main(["init", str(tmp_path), "--force"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.py", "cdk.json", "governance.yaml", "notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_init_refuses_a_file_as_the_folder(tmp_path, capsys):
    file = tmp_path / "file"
    file.write_text("")
    assert main(["init", str(file)]) == 2
    assert "FOLDER: not a folder" in capsys.readouterr().err
