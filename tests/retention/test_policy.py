"""The retention rules and their settings, without a database."""

from __future__ import annotations

import pytest

from dataloader.config import Settings, load_settings
from dataloader.exceptions import ConfigError
from dataloader.retention.policy import RetentionPolicy

DAY = 86400.0


def test_defaults_keep_failures_longer():
    policy = RetentionPolicy.from_settings(Settings())
    assert [policy.age("any", s) for s in ("succeeded", "canceled", "failed", "lost")] == [
        7 * DAY, 7 * DAY, 30 * DAY, 30 * DAY]
    assert policy.age("any", "queued") is None and policy.age("any", "running") is None


def test_per_queue_overrides_and_durations():
    settings = load_settings(retention_queues_json='{"load": {"succeeded": "1d", "failed": "90d"}}',
                             retention_canceled="12h", retention_lost=7200)
    policy = RetentionPolicy.from_settings(settings)
    assert policy.age("load", "succeeded") == DAY and policy.age("load", "failed") == 90 * DAY
    assert policy.age("load", "canceled") == 12 * 3600 and policy.age("other", "succeeded") == 7 * DAY
    assert policy.age("other", "lost") == 7200
    assert ("load", "succeeded", DAY) in policy.rules(["load", "other"])
    assert RetentionPolicy.uniform(60, ["failed"]).rules(["a"]) == [("a", "failed", 60)]


@pytest.mark.parametrize(("env", "value", "message"), [
    ("retention_queues_json", '{"load": {"queued": "1d"}}', "unknown status 'queued'"),
    ("retention_queues_json", '{"load": {"succeeded": "10m"}}', "between 1h and 3650d"),
    ("retention_queues_json", '{"load": ', "is not valid JSON"),
    ("retention_queues_json", '["load"]', "must be a JSON object"),
    ("retention_succeeded", "7 days", "not a duration"),
    ("retention_failed", "30m", "greater than or equal to 3600"),
    ("stats_keep", "9999d", "less than or equal to"),
])
def test_bad_values_are_one_line_naming_the_variable(env, value, message):
    with pytest.raises(ConfigError) as err:
        load_settings(**{env: value})
    assert f"DL_{env.upper()}" in str(err.value) and message in str(err.value)
