"""Where the guest tests are required (NUMABENCH_GUEST_REQUIRED=1: .ci/test sets it under
CI=true or NUMABENCH_GUEST=1), a run in which any of them skipped, or none passed, fails:
CI cannot pass without booting the guests. Elsewhere they skip with the reason as before."""
from __future__ import annotations

import os

import pytest

REQUIRED = os.environ.get("NUMABENCH_GUEST_REQUIRED") == "1"
_counts = {"passed": 0, "skipped": 0}
_reasons: list[str] = []


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each boot's tests in one xdist group: .ci/test runs them on two workers (--dist loadgroup),
    so a module-scoped boot runs once, on one worker, while another boots beside it (one TCG guest
    leaves about a third of two cores idle)."""
    for item in items:
        boots = sorted(f for f in getattr(item, "fixturenames", ()) if f.startswith("guest6"))
        if boots:
            item.add_marker(pytest.mark.xdist_group(boots[0]))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "guest" not in report.keywords:
        return
    if report.skipped:
        _counts["skipped"] += 1
        if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            _reasons.append(str(report.longrepr[2]).removeprefix("Skipped: "))
    elif report.passed and report.when == "call":
        _counts["passed"] += 1


def _unmet() -> str | None:
    if not REQUIRED or (_counts["passed"] and not _counts["skipped"]):
        return None
    why = f": {_reasons[0]}" if _reasons else ""
    return (f"the guest tests are required here (NUMABENCH_GUEST_REQUIRED=1) but {_counts['passed']} passed, "
            f"{_counts['skipped']} skipped{why}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _unmet() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    message = _unmet()
    if message:
        terminalreporter.write_line(f"FAILED: {message}", red=True, bold=True)
