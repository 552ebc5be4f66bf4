"""CI's skip allow-list holds: run a small suite under KVTIER_REQUIRE and see what fails it."""

from __future__ import annotations

import pytest

from ci_skips import ALLOWED

INNER_CONFTEST = "from ci_skips import pytest_configure, pytest_sessionfinish, pytest_terminal_summary\n"


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(INNER_CONFTEST)
    return pytester


def test_every_allowed_skip_says_why_ci_cannot_run_it():
    assert ALLOWED
    for pattern, why in ALLOWED:
        assert pattern and len(why.split()) >= 6, pattern


def test_a_skip_the_list_does_not_name_fails_a_ci_run(inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    inner.makepyfile(test_x="""
        import pytest
        def test_ok(): pass
        def test_unbuilt(): pytest.skip("paper/note.html not built")
        @pytest.mark.skipif(True, reason="conda is not installed (no conda here)")
        def test_conda(): pass
    """)
    monkeypatch.setenv("KVTIER_REQUIRE", "vllm,browser")
    result = inner.runpytest("-q")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*skips not allowed in CI*", "*test_unbuilt*paper/note.html not built*"])
    assert "test_conda: conda" not in result.stdout.str()  # listed: allowed


def test_only_listed_skips_pass_and_outside_ci_a_skip_stays_a_skip(inner: pytest.Pytester,
                                                                     monkeypatch: pytest.MonkeyPatch):
    inner.makepyfile(test_y="""
        import pytest
        def test_ok(): pass
        @pytest.mark.skipif(True, reason="conda is not installed (no conda here)")
        def test_conda(): pass
    """)
    monkeypatch.setenv("KVTIER_REQUIRE", "vllm")
    assert inner.runpytest("-q").ret == pytest.ExitCode.OK
    inner.makepyfile(test_z="import pytest\ndef test_unbuilt(): pytest.skip('not built')\n")
    monkeypatch.delenv("KVTIER_REQUIRE")
    assert inner.runpytest("-q").ret == pytest.ExitCode.OK
