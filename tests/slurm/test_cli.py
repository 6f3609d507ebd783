"""`gpu-governance slurm script`."""

from __future__ import annotations

import yaml

from constructs_lib.cli import main
from constructs_lib.slurm import slurm_plan
from gpu_governance_runtime.slurm.render import plan_digest

from .models import POOL, governance_model, model_data


def test_prints_the_apply_script_of_the_pool(tmp_path, capsys) -> None:
    config = tmp_path / "governance.yaml"
    config.write_text(yaml.safe_dump(model_data()))
    assert main(["slurm", "script", "--config", str(config), "--pool", POOL, "--data-root", "/fsx/x"]) == 0
    script = capsys.readouterr().out
    assert script.startswith("#!/usr/bin/env bash")
    assert f"GG_POLICY_DIGEST={plan_digest(slurm_plan(governance_model(), POOL, data_root='/fsx/x'))}" in script
    assert "gg_data_path /fsx/x/burst gg-burst 2770" in script


def test_bad_pool_exits_2_naming_the_allowed_pools(tmp_path, capsys) -> None:
    config = tmp_path / "governance.yaml"
    config.write_text(yaml.safe_dump(model_data()))
    assert main(["slurm", "script", "--config", str(config), "--pool", "nope"]) == 2
    error = capsys.readouterr().err
    assert "pools: no hyperpod_slurm pool of this name ('nope') - one of ['research-slurm']" in error
    assert "Traceback" not in error
