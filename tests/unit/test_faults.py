"""Fault points are no-ops unless named; a bad plan names what is valid."""

from __future__ import annotations

import pytest

from engine.infra import faults


def test_faults__disabled_points_do_nothing() -> None:
    faults.enable("")
    for point in faults.POINTS:
        faults.hit(point)


def test_faults__raise_fires_only_at_its_point() -> None:
    faults.enable("after_claim=raise")
    try:
        faults.hit("after_commit")
        with pytest.raises(faults.FaultInjected, match="after_claim"):
            faults.hit("after_claim")
    finally:
        faults.enable("")


def test_faults__probability_zero_never_fires() -> None:
    faults.enable("after_claim=raise:0")
    try:
        for _ in range(100):
            faults.hit("after_claim")
    finally:
        faults.enable("")


@pytest.mark.parametrize("spec", ["nowhere=kill", "after_claim=explode", "after_claim=kill:x"])
def test_faults__bad_plan_names_the_entry(spec: str) -> None:
    with pytest.raises(ValueError, match="ENGINE_FAULTS entry"):
        faults.parse(spec)
