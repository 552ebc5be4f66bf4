"""The workflow scripts' shared helpers: the scheduler's wake-up timers, a writer's inputs."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from kvtier.snake import end_scheduler_timers, numbers_writer


def test_armed_timers_are_cancelled_and_never_fire() -> None:
    fired = []
    timer = threading.Timer(30.0, lambda: fired.append(1))
    timer.start()
    started = time.monotonic()
    assert end_scheduler_timers() >= 1
    timer.join(25.0)  # a cancelled timer's thread ends at once; an armed one would still wait (issue 23: no
    assert not timer.is_alive() and not fired  # wall-clock bound a busy machine can break, only the 30 s it did not wait)
    assert time.monotonic() - started < 30.0  # it ended when cancelled, not after its 30 s


class _Input(list):
    """What Snakemake hands a script: a list of paths with names."""

    def __init__(self, named: dict):
        super().__init__(p for v in named.values() for p in ([v] if isinstance(v, str) else v))
        self._named = named

    def items(self):
        return self._named.items()


def test_a_writer_names_its_inputs_less_the_excluded_record_set() -> None:
    named = {"code": "results/code.sha256", "run": "raw/lab/run/run.yaml", "manifest": "raw/MANIFEST.tsv",
             "pins": "results/pins/lab_numbers.tsv",
             "live_records": ["raw/lab/cpu/a.prom", "raw/lab/cpu/b.csv"]}
    smk = SimpleNamespace(input=_Input(named), rule="lab_numbers")
    assert numbers_writer(smk, "lab", exclude=["live_records"]).inputs == ["raw/lab/run/run.yaml"]
    assert numbers_writer(smk, "lab").inputs == ["raw/lab/run/run.yaml", "raw/lab/cpu/a.prom", "raw/lab/cpu/b.csv"]
