import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from constructs_lib.cli import main
from constructs_lib.model.loader import default_config_text

from .org import default_data


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path, data) -> str:
    path = tmp_path / "governance.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(path)


def test_validate_default(capsys):
    code, out, err = run(capsys, "validate", "--example")
    assert code == 0
    data = default_data()
    assert out.splitlines()[0] == f"valid: 3 teams, {len(data['pools'])} pools, 2 consumer accounts, 3 priority classes"


def test_validate_lists_every_problem_on_stderr_with_exit_2(capsys, tmp_path):
    data = default_data()
    data["teams"][0]["account"] = "finance"
    data["capacity_account"]["account_id"] = "1"
    code, out, err = run(capsys, "validate", "--config", write(tmp_path, data))
    assert code == 2 and out == ""
    assert "capacity_account.account_id: invalid ('1') - 12 digits, an AWS account id" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("content", ["", "::: not yaml", "[1, 2]", "teams: 5", "a" * 10])
def test_validate_never_tracebacks(capsys, tmp_path, content):
    code, _, err = run(capsys, "validate", "--config", write(tmp_path, content))
    assert code == 2
    assert "invalid input" in err and "Traceback" not in err


def hostile_files(tmp_path) -> dict[str, str]:
    """Inputs that once crashed (TypeError, RecursionError, MemoryError, a jsii failure after
    validation) instead of being refused. Shared with tests/foundation/test_app.py."""
    full_width = default_data()
    full_width["capacity_account"]["account_id"] = "\uff11" * 12
    texts = {
        "unhashable-key": "? [a, b]\n: 1\n",
        "boolean-key": "on: 1\n",
        "deeply-nested": "organisation: " + "[" * 100_000,
        "full-width-account": yaml.safe_dump(full_width, allow_unicode=True),
    }
    files = {}
    for name, text in texts.items():
        files[name] = str(tmp_path / f"{name}.yaml")
        Path(files[name]).write_text(text, encoding="utf-8")
    files["endless"] = "/dev/zero"
    return files


@pytest.mark.parametrize("name", ["unhashable-key", "boolean-key", "deeply-nested", "full-width-account", "endless"])
def test_hostile_files_are_refused_in_one_line(capsys, tmp_path, name):
    path = hostile_files(tmp_path)[name]
    code, out, err = run(capsys, "validate", "--config", path)
    assert code == 2 and out == ""
    header, problem = err.strip().splitlines()  # the usual header and one problem line
    assert header == "gpu-governance validate: invalid input"
    assert problem.startswith(("capacity_account.account_id: invalid", f"{path}: "))


def test_console_script_exit_code_and_stderr(tmp_path):
    bad = write(tmp_path, "version: 2\n")
    result = subprocess.run(
        [sys.executable, "-m", "constructs_lib.cli", "validate", "--config", bad], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "version: invalid (2) - allowed: 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_config_from_environment(capsys, tmp_path, monkeypatch):
    data = default_data()
    data["teams"] = data["teams"][:1]
    # an account left without a team is refused (its stack would be empty)
    data["consumer_accounts"] = {data["teams"][0]["account"]: data["consumer_accounts"][data["teams"][0]["account"]]}
    for window in data["capacity_windows"]:
        window["team"] = data["teams"][0]["name"]  # a window's owner must be a declared team
    monkeypatch.setenv("GPU_GOVERNANCE_CONFIG", write(tmp_path, data))
    code, out, _ = run(capsys, "validate")
    assert code == 0 and "1 team," in out


def test_example_is_the_default_and_valid(capsys, tmp_path):
    code, out, _ = run(capsys, "example")
    assert code == 0 and out == default_config_text()
    assert run(capsys, "validate", "--config", write(tmp_path, out))[0] == 0


def test_schema_accepts_the_example_and_rejects_a_bad_one(capsys):
    code, out, _ = run(capsys, "schema")
    schema = json.loads(out)
    jsonschema.validate(yaml.safe_load(default_config_text()), schema)
    bad = default_data()
    bad["teams"][0]["fair_share_weight"] = "high"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def explained(capsys, *argv) -> dict:
    code, out, _ = run(capsys, "explain", *argv, "--json")
    assert code == 0
    return json.loads(out)


def test_explain_shows_each_teams_deal(capsys):
    rows = {(d["team"], d["pool"]): d for d in explained(capsys, "--example")["deals"]}
    research = rows[("research", "sagemaker-training")]
    assert research["max_with_borrowing"] == "16 x ml.g6e.12xlarge, 4 x ml.p5.48xlarge"  # doubled by borrow_limit 100
    assert research["reclaimable"] == "yes, jobs on borrowed capacity"
    production = rows[("production", "sagemaker-training")]
    assert (production["lends_idle"], production["reclaimable"]) == ("no (reserved)", "no (never borrows)")
    assert rows[("research", "ec2-gpu")]["reclaimable"] == "only by the reclaim controller"


def test_explain_json_has_every_deal_field_the_windows_and_the_notes(capsys):
    """Issue 41 item 8: `explain --json`, one object (there was none)."""
    from dataclasses import fields

    from constructs_lib.model.explain import Deal, caveats
    from constructs_lib.model.loader import load_model

    result = explained(capsys, "--example")
    assert set(result) == {"deals", "capacity_windows", "notes"}
    model = load_model(None)
    assert len(result["deals"]) == sum(len(t.quotas) for t in model.teams)
    assert all(set(d) == {f.name for f in fields(Deal)} for d in result["deals"])
    assert all(isinstance(value, str) for d in result["deals"] for value in d.values())
    (window,) = result["capacity_windows"].items()
    assert window[0] == "weekly-validation" and window[1]["team"] == "production" and window[1]["ended"] is False
    assert window[1]["summary"].startswith("2 x ml.p5.48xlarge for 8 h every 7 days from 2026-12-07 09:00 UTC")
    assert result["notes"] == caveats(model)


def test_explain_wraps_to_the_terminal_and_names_the_windows(capsys, monkeypatch):
    """Issue 41 items 6 and 8: a table 357 characters wide, with no word of the capacity windows."""
    monkeypatch.setenv("COLUMNS", "100")
    code, out, err = run(capsys, "explain", "--example")
    assert code == 0
    assert max(len(line) for line in (out + err).splitlines()) <= 100
    assert "research in pool sagemaker-training (batch_quota_share)" in out
    assert "  most with borrowing         16 x ml.g6e.12xlarge, 4 x ml.p5.48xlarge" in out
    windows = out[out.index("capacity windows") :]
    assert "weekly-validation: 2 x ml.p5.48xlarge for 8 h every 7 days" in windows
    assert all(line.startswith("note: ") or line.startswith("  ") for line in err.splitlines())


def test_a_window_entirely_in_the_past_is_warned_of_explained_and_audited(capsys, tmp_path):
    """Issue 41 item 6: a one-off window that ended passed `validate` in silence."""
    data = default_data()
    window = data["capacity_windows"][0]
    window.pop("repeat_every_days")
    window["start"] = "2020-01-06T09:00:00Z"
    path = write(tmp_path, data)
    code, out, err = run(capsys, "validate", "--config", path)
    assert code == 0
    assert (
        "warning: capacity_windows[0].start: window weekly-validation ended at 2020-01-06T17:00:00+00:00, before now"
        in err
    )
    assert "it buys nothing; move start to the future, set repeat_every_days, or remove it" in err
    assert explained(capsys, "--config", path)["capacity_windows"]["weekly-validation"]["ended"] is True
    code, out, _ = run(capsys, "audit", "--config", path)
    assert "can buy 2 x ml.p5.48xlarge for 8 h from 2020-01-06 09:00 UTC, for team production" in out
    assert "ENDED: entirely in the past, buys nothing" in out
    code, out, err = run(capsys, "validate", "--example")  # the example's window repeats: no warning
    assert code == 0 and "capacity_windows" not in err


def test_report_on_missing_assembly_is_bad_input(capsys, tmp_path):
    code, _, err = run(capsys, "report", str(tmp_path / "nope"))
    assert code == 2 and "not a readable cloud assembly" in err


def test_unlimited_borrowing_is_bounded_by_the_pool():
    from constructs_lib.model import BatchQuotaSharePool, Team
    from constructs_lib.model.explain import deal

    pool = BatchQuotaSharePool(name="q", capacity={"ml.p5.48xlarge": 8})
    team = Team(
        name="t",
        sharing={"strategy": "lend_and_borrow", "borrow_limit": "unlimited"},
        quotas={"q": {"ml.p5.48xlarge": 2}},
    )
    assert deal(team, pool).max_with_borrowing == "8 x ml.p5.48xlarge"


def test_an_unknown_setting_hides_no_other_problem_and_names_the_closest_setting(capsys, tmp_path):
    """Issue 41 item 7: a misspelt key stopped the checks across the file (an undeclared account,
    quotas larger than the pool) until it was fixed, with no hint of the right spelling."""
    data = default_data()
    data["teams"][0]["quota"] = data["teams"][0].pop("quotas")
    data["teams"][1]["account"] = "finance"
    data["pools"][0]["capcity"] = data["pools"][0].pop("capacity")
    code, out, err = run(capsys, "validate", "--config", write(tmp_path, data))
    assert code == 2
    lines = err.splitlines()[1:]
    assert any(
        line.startswith("teams[0].quota: invalid (")
        and line.endswith("did you mean quotas? (see `gpu-governance schema`)")
        for line in lines
    )
    assert any(line.startswith("pools[0].capcity: invalid (") and "did you mean capacity?" in line for line in lines)
    assert "teams[1].account: undeclared account ('finance') - one of ['product', 'research']" in lines
    # what teams[0] and pools[0] would say without the misspelt key is a guess, left out
    assert not any(line.startswith(("teams[0].quotas", "pools[0].capacity")) for line in lines), lines


def test_a_setting_unlike_any_known_one_gets_no_suggestion(capsys, tmp_path):
    data = default_data()
    data["teams"][0]["zzzz"] = 1
    code, _, err = run(capsys, "validate", "--config", write(tmp_path, data))
    assert code == 2
    assert "teams[0].zzzz: invalid (1) - not a known setting (see `gpu-governance schema`)" in err


def test_every_help_page_says_where_to_read_more_and_report_says_what_it_reads():
    """Issue 41 item 12: 3 of 27 --help pages pointed to a doc or example; `report --help` said
    nothing of its argument."""
    from constructs_lib.cli import build_parser

    from .test_cli_contract import leaf_commands

    root = Path(__file__).resolve().parents[2]
    for name, parser in leaf_commands(build_parser()).items():
        epilog = parser.epilog or ""
        assert epilog.startswith("More: docs/") and epilog in " ".join(parser.format_help().split()), name
        assert (root / epilog.split()[1]).is_file(), (name, epilog)
    report = leaf_commands(build_parser())["report"].format_help()
    assert "CDK_OUT     the cloud assembly folder (default cdk.out)" in report


def test_smaller_messages_name_what_to_do(capsys, tmp_path):
    """Issue 41 item 12: a Team without a preset, a cluster ARN, a team without a Slurm pool."""
    from constructs_lib import Team
    from constructs_lib.core.errors import GovernanceError

    with pytest.raises(GovernanceError) as refused:
        Team(name="research", quotas={"training": {"ml.p5.48xlarge": 1}})
    assert str(refused.value).startswith("sharing of team 'research': missing (None) - required: a preset")
    assert "preset=Preset.BACKGROUND" in str(refused.value)
    data = default_data()
    eks = next(p for p in data["pools"] if p["backend"] == "hyperpod_eks")
    eks["cluster_arn"] = "arn:aws:sagemaker:us-east-1:111122223333:cluster/My-Cluster"
    code, _, err = run(capsys, "validate", "--config", write(tmp_path, data))
    assert code == 2 and "cluster/<12 lowercase letters or digits>" in err and "[a-z0-9]{12}" not in err
    data = default_data()
    data["teams"][0]["quotas"].pop("hyperpod-slurm")
    data["teams"][0].get("slurm", {}).pop("hyperpod-slurm", None)
    path = write(tmp_path, data)
    assert run(capsys, "validate", "--config", path)[0] == 0
    code, _, err = run(capsys, "team", "submit-example", "research", "--backend", "slurm", "--config", path)
    assert code == 2
    assert (
        "backend: team research has no pool members submit to on slurm ('slurm') - a backend of the team's pools: "
        "one of ['batch', 'hyperpod_eks']" in err
    )


def test_audit_says_what_an_access_entry_lets_a_team_do(capsys):
    code, out, _ = run(capsys, "audit", "--example")
    assert code == 0 and "can reach the cluster's Kubernetes API (an EKS access entry) as group" in out
    assert "can EKS access entry as" not in out
