"""Instance types checked against the service models botocore ships: a well-formed name that
no service knows (``ml.g9x.12xlarge``) is refused before anything is deployed, with the nearest
names AWS does know. A type newer than the installed botocore is allowed by listing it in the
governance file's ``allow_unlisted_instance_types`` (or by upgrading botocore)."""

from __future__ import annotations

import difflib
import gzip
import importlib.util
import json
import re
from functools import cache
from importlib import metadata
from pathlib import Path

from constructs_lib.backends import backend_of
from constructs_lib.backends.base import CLUSTER, EC2, TRAINING
from constructs_lib.core.errors import Problem

from .base import OrganisationView


@cache
def known(enumeration: tuple[str, str]) -> frozenset[str]:
    """The instance types the service model in the installed botocore lists, read once per process
    from botocore's data files (its newest API version of the service) without importing botocore,
    which would cost every validation about a second."""
    service, shape = enumeration
    (package,) = importlib.util.find_spec("botocore").submodule_search_locations
    versions = Path(package) / "data" / service
    folder = versions / max(
        p.name for p in versions.iterdir() if p.is_dir()
    )  # API versions are dates: the newest sorts last
    compressed = folder / "service-2.json.gz"
    raw = gzip.decompress(compressed.read_bytes()) if compressed.exists() else (folder / "service-2.json").read_bytes()
    # Only the one shape's enumeration is parsed: the whole EC2 model is megabytes of JSON.
    # tests/foundation/test_instance_types.py checks the result against botocore's own reading.
    found = re.compile(rb'"%s"\s*:\s*\{[^{}]*?"enum"\s*:\s*(\[[^\]]*\])' % re.escape(shape.encode())).search(raw)
    if found is None:
        raise LookupError(f"botocore's {service} model has no enumeration {shape}")
    return frozenset(json.loads(found.group(1)))


def botocore_version() -> str:
    return metadata.version("botocore")


def _problem(path: str, instance_type: str, enumerations: tuple[tuple[str, str], ...]) -> Problem | None:
    names = frozenset().union(*(known(e) for e in enumerations))
    if instance_type in names:
        return None
    where = " or ".join(f"{service} {shape}" for service, shape in enumerations)
    near = difflib.get_close_matches(instance_type, sorted(names), n=3, cutoff=0.6)
    return Problem(
        path=path,
        wrong=f"not an instance type AWS knows ({where} in botocore {botocore_version()})",
        value=instance_type,
        allowed=(f"e.g. {', '.join(near)}; " if near else "")
        + "a type newer than this botocore: upgrade botocore, or list it "
        "in allow_unlisted_instance_types",
    )


def check_instance_types(model: OrganisationView) -> list[Problem]:
    """Every pool's instance types and every capacity window's, against the API that takes them."""
    allowed = set(model.allow_unlisted_instance_types)
    found = [
        _problem(f"pools[{index}].capacity.{instance_type}", instance_type, (backend_of(pool).instance_types,))
        for index, pool in enumerate(model.pools)
        for instance_type in pool.capacity
        if instance_type not in allowed
    ]
    found += [
        _problem(
            f"capacity_windows[{index}].instance_type",
            window.instance_type,
            (TRAINING, CLUSTER) if window.instance_type.startswith("ml.") else (EC2,),
        )
        for index, window in enumerate(model.capacity_windows)
        if window.instance_type not in allowed
    ]
    return [problem for problem in found if problem is not None]
