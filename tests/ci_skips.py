"""The skips CI may show, and the pytest hooks that fail a CI run on any other.

A test that always skips where it matters is a test that cannot fail: CI (KVTIER_REQUIRE set, as
`.ci/run` does) must run every test but those whose reason is listed here, each with why CI cannot
run it. Any other skip fails the run, named on the console, so a new always-skipping test is seen
the first time CI runs it. Locally (KVTIER_REQUIRE unset) skips stay skips.
"""

from __future__ import annotations

import os
import re

import pytest

# (pattern searched in the skip reason, why CI may skip it)
ALLOWED: list[tuple[str, str]] = [
    (r"conda is not installed",
     "this workplace reaches PyPI, Debian and npm only, so no conda environment can be created in CI"),
    (r"reads PyPI for ~4 minutes: set KVTIER_ONLINE=1",
     "the GPU lock's resolution from PyPI is an opt-in check of a lock refresh, not of a submission"),
]

class SkipLedger:
    """Every skip of the session with its reason, as pytest reports it."""

    def __init__(self) -> None:
        self.skips: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # a skip marker is reported at setup, pytest.skip() at call: either way one report a test
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skips.append((report.nodeid, reason_of(report)))


LEDGER = pytest.StashKey[SkipLedger]()


def enforced() -> bool:
    """CI's setting: a skip not in ALLOWED fails the run."""
    return bool(os.environ.get("KVTIER_REQUIRE", "").strip())


def reason_of(report: pytest.TestReport) -> str:
    """The text pytest prints for a skip: longrepr is (file, line, 'Skipped: reason')."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def allowed(reason: str) -> bool:
    return any(re.search(pattern, reason) for pattern, _ in ALLOWED)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[LEDGER] = ledger = SkipLedger()
    config.pluginmanager.register(ledger, "kvtier-ci-skips")


def unlisted(config: pytest.Config) -> list[tuple[str, str]]:
    ledger = config.stash.get(LEDGER, None)
    return [(node, why) for node, why in (ledger.skips if ledger else []) if not allowed(why)]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if enforced() and unlisted(session.config) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    bad = unlisted(config)
    if enforced() and bad:
        terminalreporter.section("skips not allowed in CI (tests/ci_skips.py ALLOWED)", red=True)
        for node, why in bad:
            terminalreporter.write_line(f"{node}: {why}")
