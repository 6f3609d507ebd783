"""Counts read as English in the CLI's output (the command itself: tests/foundation/test_cli.py::test_config_from_environment)."""

from constructs_lib.core.wording import counted


def test_one_is_singular_and_every_other_count_plural():
    assert [counted(n, "pool") for n in (0, 1, 2)] == ["0 pools", "1 pool", "2 pools"]
    assert counted(1, "priority class") == "1 priority class" and counted(3, "priority class") == "3 priority classes"
