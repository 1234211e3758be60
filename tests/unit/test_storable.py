"""The one rule of what JSON and text may be stored (model/storable.py), without a database: the cheap
check on a value's JSON text answers as the full walk does, and every face's args go through it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dataloader.exceptions import InvalidJobRequest, InvalidObserverRequest
from dataloader.model.schedule import ScheduleSpec
from dataloader.model.storable import MAX_JSON_DEPTH, json_storage_problem, json_text_problem
from dataloader.observers.manager import ObserverManager


def nested(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels):
        value = {"a": value}
    return value


VALUES = [
    {}, {"a": 1}, {"s": "plain"}, {"s": "ünïcode ✓"}, {"s": "emoji 😀"}, {"s": "text with \\u0000 spelled out"},
    {"s": "a\x00b"}, {"a\x00": 1}, {"s": "\ud800"}, {"x": float("nan")}, {"x": [float("inf")]},
    {"s": "NaN", "t": "Infinity"}, nested(MAX_JSON_DEPTH), nested(MAX_JSON_DEPTH + 1),
    {"l": [[[[1]]]] * 40}, {"t": ("a\x00",)},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
@pytest.mark.parametrize("ascii_only", [True, False])
def test_the_text_check_answers_as_the_walk(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert json_text_problem(value, text) == json_storage_problem(value)


def test_a_schedule_and_an_observer_refuse_what_the_http_bodies_refuse() -> None:
    with pytest.raises(ValueError, match=f"nests deeper than {MAX_JSON_DEPTH} levels"):
        ScheduleSpec(name="s", task="t", every_sec=60, args=nested(MAX_JSON_DEPTH + 1))
    with pytest.raises(ValueError, match="must not contain NUL characters"):
        ScheduleSpec(name="s", task="t", every_sec=60, args={"s": "a\x00b"})
    with pytest.raises(InvalidObserverRequest, match="args: must not contain unpaired UTF-16 surrogates"):
        ObserverManager.spec(name="o", kind="k", args={"s": "\ud800"})
    assert ObserverManager.spec(name="o", kind="k", args={"s": "text with \\u0000 spelled out"})


def test_job_args_are_refused_by_the_same_rule() -> None:
    from dataloader.jobs.manager import JobManager

    encode = JobManager._encode_args
    holder = type("M", (), {"max_args_bytes": 10 ** 6})()
    assert encode(holder, {"s": "text with \\u0000 spelled out"})  # type: ignore[arg-type]
    for args, problem in [({"s": "a\x00b"}, "NUL"), ({"x": float("nan")}, "NaN"),
                          (nested(MAX_JSON_DEPTH + 1), "nests deeper"), ({"s": "\ud800"}, "surrogates")]:
        with pytest.raises(InvalidJobRequest, match=f"args: .*{problem}"):
            encode(holder, args)  # type: ignore[arg-type]
