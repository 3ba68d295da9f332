"""CI mode (``FAULTDRILL_CI=1``, which .ci/run sets, or ``CI=true``) as root: the run must
prove the drills, so a machine without what they need fails at once (naming it and the
fix), and any test that skips anyway makes the run fail instead of going green.

Loaded by ``tests/conftest.py``; a pytest plugin of its own so that it can be tested on
a test file of a test (``-p tests.ci_mode``)."""

from __future__ import annotations

import os
import shutil

import pytest

_skipped: list[str] = []


def ci_mode() -> bool:
    """CI mode, as root (as a normal user the drill tests skip by design)."""
    flag = os.environ.get("FAULTDRILL_CI") == "1"
    flag |= os.environ.get("CI", "").lower() in ("1", "true", "yes")
    return flag and os.geteuid() == 0


def what_the_drills_lack() -> list[str]:
    """What this machine lacks for the drill tests, each with its fix."""
    from faultdrill.host.linux import netns_unavailable
    from faultdrill.platforms.local.platform import fuse_missing

    out = []
    if shutil.which("iptables") is None:
        out.append("iptables (link faults)")
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        out.append("chromium (the HTML report's browser test)")
    out += fuse_missing()
    why = netns_unavailable()
    if why is not None and not out:
        out.append(why)
    return out


def pytest_sessionstart(session: pytest.Session) -> None:
    if not ci_mode():
        return
    lacks = what_the_drills_lack()
    if lacks:
        pytest.exit(
            "CI mode as root: the drill tests would skip, this machine lacks: "
            f"{'; '.join(lacks)}; run scripts/setup-system.sh tests (as root) first",
            returncode=3,
        )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if ci_mode() and _skipped and exitstatus == 0:
        session.exitstatus = 1
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"CI mode as root: {len(_skipped)} test(s) skipped, which proves nothing; "
                "failing the run:",
                red=True,
            )
            for line in _skipped:
                reporter.write_line(f"  {line}")
