"""A replay run's client log is read and parsed once (records.replayrun.read keeps its checked
records): what the run's parts derive from them equals reading the file again, touches the same
files, and a log with two faults is refused at the same line as when each part read it alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvtier.counterfactual.sweepcheck import SERVICE_FIELDS
from kvtier.errors import RawRecordError
from kvtier.records import replayrun
from kvtier.records.clientlog import client_lines, read_client_log
from kvtier.records.touch import scope

RUN = Path("raw/production/cpu-curve/r1-pool-0.03125")
pytestmark = pytest.mark.skipif(not (RUN / replayrun.CLIENT).is_file(), reason="needs the pinned curve run")


def test_parts_equal_reading_the_log_again() -> None:
    run = replayrun.read(RUN)
    fresh = replayrun.ReplayRun(*(getattr(run, f) for f in ("path", "meta", "requests", "shape", "measured",
                                                           "preemptions", "stored_chunks")))
    assert run._client is not None and fresh._client is None
    for extra in (None, SERVICE_FIELDS):
        with scope() as kept_files:
            kept = run.answered(extra)
        with scope() as fresh_files:
            again = fresh.answered(extra)
        assert kept.equals(again) and kept.attrs == again.attrs and kept_files == fresh_files
    with scope() as kept_files:
        kept_lines = run.client_lines()
    with scope() as fresh_files:
        fresh_lines = fresh.client_lines()
    assert kept_lines == fresh_lines and kept_files == fresh_files
    a, b = run.sent(), fresh.sent()
    assert a.keys() == b.keys() and all(a[k][0] == b[k][0] and (a[k][1] == b[k][1]).all() for k in a)


def test_two_faults_name_the_first_line_as_before(tmp_path: Path) -> None:
    d = tmp_path / "run"
    shutil.copytree(RUN, d)
    recs = [json.loads(ln) for ln in (d / replayrun.CLIENT).read_text().splitlines() if ln.strip()]
    recs[2]["max_tokens"] = "two"          # a field of the wrong type (read_client_log's check) on line 3
    recs[5]["total_s"] = -1.0              # an impossible time (client_lines' check) on line 6
    (d / replayrun.CLIENT).write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(RawRecordError) as whole:
        replayrun.read(d)
    with pytest.raises(RawRecordError) as alone:
        read_client_log(d / replayrun.CLIENT, run_seconds=replayrun.observation_seconds(d / replayrun.HOST_YAML))
    assert whole.value.line == alone.value.line == 3 and str(whole.value) == str(alone.value)
    assert len(list(client_lines(RUN / replayrun.CLIENT))) == len(recs)
