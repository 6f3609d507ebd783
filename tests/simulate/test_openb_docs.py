"""Whoever reads how to replay the openb trace learns where to get it: the docs, examples and benchmarks that
name a trace file say alibaba/clusterdata's folder, and no path outside the repository."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = "cluster-trace-gpu-v2023/csv"


def uses_an_openb_file() -> list[Path]:
    candidates = [
        ROOT / "README.md",
        *ROOT.glob("docs/*.md"),
        *ROOT.glob("examples/*.yaml"),
        *ROOT.glob("benchmarks/*"),
    ]
    return [p for p in candidates if p.is_file() and "openb_pod_list" in p.read_text(encoding="utf-8")]


def test_the_trace_is_named_where_it_is_used_and_no_local_path_is():
    files = uses_an_openb_file()
    assert {"performance.md", "simulator.md", "openb-governance.yaml"} <= {p.name for p in files}
    for path in files:
        assert "shared/traces" not in path.read_text(encoding="utf-8"), path
    guide = (ROOT / "docs" / "simulator.md").read_text(encoding="utf-8")
    assert "Getting the openb trace" in guide and "alibaba/clusterdata" in guide
    assert f"{SOURCE}/openb_pod_list_default.csv" in guide and f"{SOURCE}/openb_pod_list_gpuspec33.csv" in guide
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert "clusterdata" in text or "simulator.md" in text, (
            f"{path} uses the trace without saying where it comes from"
        )


def test_no_trace_file_is_committed():
    assert not list(ROOT.glob("**/openb_pod_list_*.csv"))
