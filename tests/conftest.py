import os

# jsii prints a banner on Node.js 20 unless silenced; set before aws_cdk is first imported.
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")


def pytest_terminal_summary(terminalreporter) -> None:
    """Prints the Kueue conformance summary (tests/reclaim/test_kueue_conformance.py) after a run
    that included it. Here, not in tests/reclaim: with pytest-xdist (make test) only the controller
    process writes the summary, and it loads this top-level conftest alone."""
    ran = any(
        "test_kueue_conformance.py" in report.nodeid
        for reports in terminalreporter.stats.values()
        for report in reports
        if hasattr(report, "nodeid")
    )
    if ran:
        from tests.reclaim.test_kueue_conformance import summary

        terminalreporter.write_line(summary())
