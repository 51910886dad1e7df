"""The engine under every pool: fair turns between owners, straggler deadlines."""

from __future__ import annotations

import time

import pytest

from pymlgo.workers import wire
from pymlgo.workers.dispatch import Dispatcher
from pymlgo.workers.protocol import StragglerCut
from tests.workers_support import spec_for

pytest_plugins = ("tests.workers_fixtures",)  # fixtures: worker_jobs, reference


def test_idle_workers_take_turns_between_owners_not_first_come_first_served(worker_jobs):
    d = Dispatcher(1)
    try:
        d.wait_ready(60)
        spec = wire.dumps(spec_for("never"))
        runs = {name: d.open_run(spec, 60, owner=name, label=name) for name in ("A", "B")}
        for rid in runs.values():  # A queues everything before B queues anything
            for i, job in enumerate(worker_jobs[:4]):
                d.submit(rid, i, job.module, wire.dumps(job))
        done = 0
        while done < 8:
            d.dispatch()
            done += len(d.wait(5))
        assert [owner for owner, _ in d.starts] == ["A", "B"] * 4
    finally:
        d.close()


def test_an_owner_that_closes_its_run_leaves_the_rotation(worker_jobs):
    d = Dispatcher(1)
    try:
        d.wait_ready(60)
        spec = wire.dumps(spec_for("never"))
        a = d.open_run(spec, 60, owner="A", label="A")
        b = d.open_run(spec, 60, owner="B", label="B")
        for rid in (a, b):
            for i, job in enumerate(worker_jobs[:3]):
                d.submit(rid, i, job.module, wire.dumps(job))
        d.close_run(a)
        done = 0
        while done < 3:
            d.dispatch()
            done += len(d.wait(5))
        assert {owner for owner, _ in d.starts} == {"B"}
    finally:
        d.close()


def test_straggler_cut_arms_once_the_fraction_is_done_then_waits_the_grace():
    cut = StragglerCut(10, 0.8, grace_s=0.2)
    for _ in range(7):
        cut.record_done()
    assert not cut.expired() and cut.timeout(5.0) == 5.0
    cut.record_done()
    assert not cut.expired() and 0 < cut.timeout(5.0) <= 0.2
    time.sleep(0.25)
    assert cut.expired() and cut.timeout(5.0) == 0.0


def test_without_min_fraction_nothing_is_ever_cut():
    cut = StragglerCut(3, None, 0.0)
    for _ in range(3):
        cut.record_done()
    assert not cut.expired()


@pytest.mark.parametrize("fraction", [0.0, 1.5, -1])
def test_min_fraction_must_be_a_fraction(fraction):
    with pytest.raises(ValueError, match="min_fraction"):
        StragglerCut(3, fraction)
