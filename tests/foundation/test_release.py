"""The release path (issue 41, docs/install.md): `make dist` builds the wheel and the source
distribution of pyproject.toml's version with `python -m build`; the wheel holds the library, the
controllers' code and their data files, and installs into a fresh virtual environment whose
`gpu-governance` and `import constructs_lib` work without the repository."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "GPU_GOVERNANCE_CONFIG")}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{command}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """What `make dist` writes (the same command, another output folder)."""
    outdir = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", str(outdir), str(ROOT)], cwd=ROOT)
    return outdir


def sources(package_root: Path, package: str) -> set[str]:
    return {
        path.relative_to(package_root).as_posix()
        for path in (package_root / package).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_make_dist_builds_this_version_with_python_m_build():
    makefile = (ROOT / "Makefile").read_text()
    assert "\ndist: " in makefile and "-m build --outdir dist" in makefile


def test_the_wheel_holds_the_library_the_controllers_and_their_data(dist):
    (wheel,) = dist.glob("*.whl")
    assert wheel.name == f"cdk_gpu_governance-{VERSION}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = sources(ROOT, "constructs_lib") | sources(ROOT / "lambda", "gpu_governance_runtime")
    assert expected - names == set()  # every module and data file, the feature flags included
    assert {"constructs_lib/data/feature-flags.json", "constructs_lib/data/default-governance.yaml"} <= names
    packages = {name.split("/")[0] for name in names}
    assert packages == {"constructs_lib", "gpu_governance_runtime", f"cdk_gpu_governance-{VERSION}.dist-info"}
    # the Apache-2.0 text travels with the code (PEP 639 license-files picks up LICENSE)
    assert f"cdk_gpu_governance-{VERSION}.dist-info/licenses/LICENSE" in names
    (sdist,) = dist.glob("*.tar.gz")
    assert sdist.name == f"cdk_gpu_governance-{VERSION}.tar.gz"
    with tarfile.open(sdist) as archive:
        assert f"cdk_gpu_governance-{VERSION}/pyproject.toml" in archive.getnames()


def test_the_wheel_installs_into_a_fresh_venv_and_works_without_the_repository(dist, tmp_path):
    (wheel,) = dist.glob("*.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    run([str(venv / "bin" / "pip"), "install", "--quiet", str(wheel)], cwd=tmp_path)  # the member install
    tool = str(venv / "bin" / "gpu-governance")
    assert run([tool, "--version"], cwd=tmp_path).stdout.strip() == f"gpu-governance {VERSION}"
    assert run([tool, "validate", "--example"], cwd=tmp_path).stdout.startswith("valid: 3 teams")
    run([tool, "init", "platform"], cwd=tmp_path)
    assert sorted(p.name for p in (tmp_path / "platform").iterdir()) == ["app.py", "cdk.json", "governance.yaml"]
    run([tool, "validate", "--config", "platform/governance.yaml"], cwd=tmp_path)
    probe = (
        "import constructs_lib, gpu_governance_runtime\n"
        "from constructs_lib.member import service_job_request\n"
        "print(constructs_lib.__file__)\nprint(gpu_governance_runtime.__file__)\n"
        "try:\n    constructs_lib.QuotaManagedTrainingQueue\nexcept ModuleNotFoundError as error:\n    print(error)\n"
    )
    library, runtime, missing = run([str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path).stdout.splitlines()
    assert Path(library).is_relative_to(venv) and Path(runtime).is_relative_to(venv)  # not this checkout
    assert "install the [cdk] extra (pip install 'cdk-gpu-governance[cdk]')" in missing
