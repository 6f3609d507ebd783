"""``assembly_diff.py --runtime-moved`` (a move of runtime modules): templates equal modulo the runtime
assets' hashes pass; anything else a move must not change is found."""

from __future__ import annotations

import json
from pathlib import Path

from .assembly_diff import differences

HANDLER = "gpu_governance_runtime.reclaim.handler.handler"


def assembly(root: Path, *, asset_hash: str, module: str, policy: str = '{"pools": []}', memory: int = 256) -> Path:
    """A cloud assembly of one function whose runtime asset holds ``module`` (the handler's) and ``policy.json``."""
    package = root / f"asset.{asset_hash}" / "gpu_governance_runtime"
    (package / Path(module).parent).mkdir(parents=True)
    (package / module).write_text("def handler(event, context):\n    return None\n")
    (package / "contract.py").write_text("BACKENDS = ()\n")
    (package / "policy.json").write_text(policy)
    function = {
        "Type": "AWS::Lambda::Function",
        "Properties": {"Handler": HANDLER, "Code": {"S3Key": f"{asset_hash}.zip"}, "MemorySize": memory},
        "Metadata": {"aws:asset:path": f"asset.{asset_hash}"},
    }
    (root / "stack.template.json").write_text(json.dumps({"Resources": {"Function": function}}))
    return root


def test_a_runtime_move_that_changes_only_the_hash_is_identical(tmp_path):
    before = assembly(tmp_path / "before", asset_hash="a" * 64, module="reclaim/handler.py")
    after = assembly(tmp_path / "after", asset_hash="b" * 64, module="reclaim/handler.py")
    assert differences(before, after, runtime_moved=True) == []
    # compared whole, the hash is a change
    assert differences(before, after) == ["template stack.template.json: resource Function changed"]


def test_a_runtime_move_finds_what_else_changed(tmp_path):
    before = assembly(tmp_path / "before", asset_hash="a" * 64, module="reclaim/handler.py")
    memory = assembly(tmp_path / "memory", asset_hash="b" * 64, module="reclaim/handler.py", memory=512)
    policy = assembly(tmp_path / "policy", asset_hash="c" * 64, module="reclaim/handler.py", policy='{"pools": [1]}')
    handler = assembly(tmp_path / "handler", asset_hash="d" * 64, module="reclaim/tick.py")
    assert differences(before, memory, runtime_moved=True) == [
        "template stack.template.json: resource Function changed"
    ]
    # another policy document is another asset
    assert differences(before, policy, runtime_moved=True) == [
        "template stack.template.json: resource Function changed"
    ]
    assert differences(before, handler, runtime_moved=True) == [
        f"after: template stack.template.json: Function's handler {HANDLER} is not in its asset"
    ]
