"""Prints the Kueue conformance summary (test_kueue_conformance.py) after a run that included it."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter) -> None:
    ran = any(
        "test_kueue_conformance.py" in report.nodeid
        for reports in terminalreporter.stats.values()
        for report in reports
        if hasattr(report, "nodeid")
    )
    if ran:
        from .test_kueue_conformance import summary

        terminalreporter.write_line(summary())
