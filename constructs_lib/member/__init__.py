"""The team member's side: find the team's setup and submit a job to its share on every backend.

Plain Python and boto3 (the SageMaker SDK path imports ``sagemaker`` only when used); no aws_cdk.
Each name loads on first use (PEP 562): ``setup``'s, and every backend's submission helpers (the
``__all__`` of its package's ``member`` module), which import ``member.setup``.
"""

from typing import TYPE_CHECKING

from constructs_lib.core.lazy import lazy_exports

if TYPE_CHECKING:
    from .setup import MEMBER_BACKENDS, TeamSetup, check_job_name, team_setup, unique_job_name

_DEFINED_IN = dict.fromkeys(
    ("MEMBER_BACKENDS", "TeamSetup", "check_job_name", "team_setup", "unique_job_name"), "setup"
)


def _submission_helpers() -> dict[str, str]:
    from constructs_lib.backends import BACKENDS

    return {
        name: helpers.__name__
        for backend in BACKENDS.values()
        if (helpers := backend.part("member")) is not None
        for name in helpers.__all__
    }


__getattr__, __dir__ = lazy_exports(__name__, _DEFINED_IN, _submission_helpers)
