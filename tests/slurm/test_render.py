"""Unit tests of the generated apply script (bash runs here; Slurm is not needed)."""

from __future__ import annotations

import grp
import json
import os
import shlex
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from constructs_lib.slurm import slurm_plan
from gpu_governance_runtime.slurm import SlurmPlan, SlurmQos, render_apply_script
from gpu_governance_runtime.slurm.render import library_text, plan_digest

from .models import POOL, governance_model


@pytest.fixture(scope="module")
def plan() -> SlurmPlan:
    return slurm_plan(governance_model(), POOL)


def bash(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script, "bash", *args], capture_output=True, text=True, env=env, timeout=30)


def test_script_is_valid_bash_and_calls_every_object_once(plan: SlurmPlan) -> None:
    script = render_apply_script(plan)
    assert bash(f"bash -n <<'EOF'\n{script}\nEOF").returncode == 0
    calls = [line.split()[0:2] for line in script.splitlines() if line.startswith("gg_")]
    assert calls.count(["gg_qos", "burst.borrow"]) == 1
    assert ["gg_account", "burst"] in calls and ["gg_user", "dave"] in calls
    assert "gg_partition borrow steady-g5-12xlarge,burst-g5-12xlarge burst burst.borrow" in script
    assert "gg_qos burst.borrow 0 4" in script
    assert "gg_qos_preempts burst.urgent burst.borrow,burst.low,burst.standard" in script  # sorted like sacctmgr


def test_values_are_shell_quoted(plan: SlurmPlan) -> None:
    hostile = replace(plan, data_paths=(replace(plan.data_paths[0], path="/fsx/a b;rm -rf /"),))
    assert "gg_data_path '/fsx/a b;rm -rf /' gg-critical 2770" in render_apply_script(hostile)


def test_digest_names_the_policy_version(plan: SlurmPlan) -> None:
    assert plan_digest(plan) == plan_digest(slurm_plan(governance_model(), POOL))
    changed = replace(plan, qos=plan.qos[:-1] + (replace(plan.qos[-1], grp_gpus=8),))
    assert plan_digest(changed) != plan_digest(plan)
    assert f"GG_POLICY_DIGEST={plan_digest(plan)}" in render_apply_script(plan)


def test_plan_refuses_references_to_undeclared_objects(plan: SlurmPlan) -> None:
    with pytest.raises(ValueError, match="undeclared objects: qos nobody.borrow"):
        replace(plan, qos=plan.qos + (SlurmQos(name="x", priority=1, preempts=("nobody.borrow",)),))


def test_unknown_option_is_refused_before_anything_runs(plan: SlurmPlan, tmp_path) -> None:
    script = tmp_path / "apply.sh"
    script.write_text(render_apply_script(plan))
    result = subprocess.run(["bash", str(script), "--force"], capture_output=True, text=True)
    assert result.returncode == 1
    assert "unknown option --force (allowed: --dry-run, --os-only)" in result.stdout


def test_node_map_comes_from_hyperpod_resource_config(tmp_path) -> None:
    config = tmp_path / "resource_config.json"
    config.write_text(
        json.dumps(
            {
                "InstanceGroups": [
                    {
                        "Name": "steady-p5-48xlarge",
                        "Instances": [{"CustomerIpAddress": "10.1.2.3"}, {"CustomerIpAddress": "10.1.2.4"}],
                    },
                    {"Name": "controller", "Instances": [{"CustomerIpAddress": "10.1.0.9"}]},
                ]
            }
        )
    )
    result = bash(
        library_text() + '\ngg_load_node_map; for g in "${!GG_NODES[@]}"; do echo "$g=${GG_NODES[$g]}"; done',
        env={"PATH": "/usr/bin:/bin", "GG_RESOURCE_CONFIG": str(config)},
    )
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == ["controller=ip-10-1-0-9", "steady-p5-48xlarge=ip-10-1-2-3,ip-10-1-2-4"]


def test_missing_node_map_is_a_clear_error(tmp_path) -> None:
    result = bash(
        library_text() + "\ngg_load_node_map",
        env={"PATH": "/usr/bin:/bin", "GG_RESOURCE_CONFIG": str(tmp_path / "absent.json")},
    )
    assert result.returncode == 1
    assert f"set GG_NODE_MAP (no HyperPod {tmp_path / 'absent.json'} here)" in result.stdout


def test_preempt_lists_are_set_after_the_lists_they_name(plan: SlurmPlan) -> None:
    """Slurm 22.05 caches an emptied list with a phantom entry; the script resets empty lists
    before the first list that may name them, so empty lists come first, then each QoS after
    the QoS it preempts."""
    calls = [line.split()[1:] for line in render_apply_script(plan).splitlines() if line.startswith("gg_qos_preempts ")]
    order = [name for name, _ in calls]
    lists = {name: [] if listed == "''" else listed.split(",") for name, listed in calls}
    assert sorted(order) == sorted(q.name for q in plan.qos)
    empty = [name for name in order if not lists[name]]
    assert order[: len(empty)] == empty and "burst.borrow" in empty and "critical.low" in empty
    for position, name in enumerate(order):
        assert set(lists[name]) <= set(order[:position]), f"{name} is set before a QoS it names"
    # Plan order is the other way round (most urgent class first), so the sort did the work.
    assert order.index("critical.standard") < order.index("critical.urgent")
    assert [q.name for q in plan.qos].index("critical.urgent") < [q.name for q in plan.qos].index("critical.standard")


# --- data paths: the only place the script hands tenants write access -----------------------

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="creates root-owned directories")
GROUP = grp.getgrgid(1).gr_name  # any existing group other than root's (daemon on Debian)


def data_path(path: Path, *, dry_run: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the script's own gg_data_path, as the generated script calls it."""
    script = f"set -euo pipefail\n{library_text()}\n{_call_line('gg_data_path', str(path), GROUP, '2770')}\ngg_end"
    return bash(script, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "GG_DRY_RUN": "1" if dry_run else "0"})


def _call_line(*words: str) -> str:
    return " ".join(shlex.quote(w) for w in words)


def owner_and_mode(path: Path) -> tuple[int, int, int]:
    info = path.lstat()
    return info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)


@root_only
def test_missing_data_path_is_created_for_the_team_and_its_root_too(tmp_path: Path) -> None:
    path = tmp_path / "teams" / "burst"
    result = data_path(path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert owner_and_mode(path) == (0, 1, 0o2770)
    assert owner_and_mode(path.parent)[0] == 0 and "changed=2" in result.stdout
    again = data_path(path)
    assert "changed=0 unchanged=1 warnings=0" in again.stdout


@root_only
def test_dry_run_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "teams" / "burst"
    result = data_path(path, dry_run=True)
    assert "would change: create " + str(path) in result.stdout and not path.parent.exists()


@root_only
def test_an_existing_directory_is_never_chowned_or_chmodded(tmp_path: Path) -> None:
    """A user's home (a team named ubuntu under /fsx) or a system directory keeps its owner and mode."""
    path = tmp_path / "teams" / "ubuntu"
    path.mkdir(parents=True)
    os.chown(path, 65534, 65534)
    path.chmod(0o750)
    result = data_path(path)
    assert result.returncode == 0
    assert owner_and_mode(path) == (65534, 65534, 0o750)
    assert "the script never changes a directory it did not create" in result.stdout and "warnings=1" in result.stdout


@root_only
def test_a_link_in_place_of_the_team_directory_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "etc"
    victim.mkdir(mode=0o755)
    (tmp_path / "teams").mkdir()
    (tmp_path / "teams" / "eve").symlink_to(victim)
    result = data_path(tmp_path / "teams" / "eve")
    assert owner_and_mode(victim) == (0, 0, 0o755)
    assert "is not a directory this script created; left alone" in result.stdout


@root_only
@pytest.mark.parametrize(("uid", "mode"), [(65534, 0o755), (0, 0o775), (0, 0o757)])
def test_no_team_directory_where_others_could_swap_it_for_a_link(tmp_path: Path, uid: int, mode: int) -> None:
    """A data root that a user owns, or that a group or everyone may write, lets them put a link
    to /etc where the next team's directory goes between the check and the creation."""
    root = tmp_path / "teams"
    root.mkdir()
    os.chown(root, uid, 0)
    root.chmod(mode)
    result = data_path(root / "burst")
    assert not (root / "burst").exists()
    assert (
        f"{root} (or a directory above it) can be changed by users other than root; {root / 'burst'} not created"
        in result.stdout
    )


@root_only
def test_a_missing_data_root_is_not_created_in_someone_elses_directory(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    result = data_path(theirs / "teams" / "burst")
    assert not (theirs / "teams").exists() and "not created" in result.stdout


@root_only
def test_a_link_owned_by_someone_else_above_the_data_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    link = tmp_path / "shared"
    link.symlink_to(tmp_path / "real")
    os.lchown(link, 65534, 65534)
    result = data_path(link / "burst")
    assert not (tmp_path / "real" / "burst").exists() and "not created" in result.stdout


def test_a_paused_team_is_held_with_grp_jobs_zero_and_the_others_are_not() -> None:
    from .models import default_teams

    teams = default_teams()
    teams[1] = {**teams[1], "paused": True}
    script = render_apply_script(slurm_plan(governance_model(teams=teams), POOL))
    accounts = {line.split()[1]: line.split()[2:] for line in script.splitlines() if line.startswith("gg_account ")}
    assert (
        accounts["steady"][-1] == "0" and len(accounts["steady"]) == 5
    )  # parent, fairshare, QoS, default QoS, GrpJobs
    assert len(accounts["burst"]) == 4 and len(accounts["critical"]) == 4
