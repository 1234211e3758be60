import pytest

from dataloader.config import load_settings, parse_workers_json
from dataloader.exceptions import ConfigError
from tests.support.cli import run


def test_workers_json_parses_queues_and_concurrency():
    workers = parse_workers_json('[{"queue":"load.cbr","concurrency":2},{"queue":"load.sgx","concurrency":1}]')
    assert [(w.queue, w.concurrency) for w in workers] == [("load.cbr", 2), ("load.sgx", 1)]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("nope", "is not valid JSON"),
        ('{"queue": "a"}', "must be a JSON list"),
        ('[{"queue":"a","concurrency":0}]', "greater than or equal to 1"),
        ('[{"queue":"a","concurrency":1,"conc":2}]', "unknown key 'conc'"),
        ('[{"queue":"a","concurrency":1},{"queue":"a","concurrency":2}]', "listed twice"),
        ('[{"concurrency":1}]', "queue: Field required"),
        ('["a"]', "item 0 must be an object"),
        ('[{"queue":"","concurrency":1}]', "queue"),
    ],
)
def test_bad_workers_json_names_the_variable_and_the_problem(raw, expected):
    with pytest.raises(ConfigError) as err:
        parse_workers_json(raw)
    assert err.value.variable == "WORKERS_JSON"
    assert expected in str(err.value)


def test_spec_defaults(monkeypatch):
    for name in ("DL_HEARTBEAT_SEC", "DL_DEFAULT_LEASE_TTL_SEC", "DL_REAPER_PERIOD_SEC", "DL_CLAIM_BACKOFF_SEC"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings()
    assert (settings.heartbeat_sec, settings.default_lease_ttl_sec, settings.reaper_period_sec,
            settings.claim_backoff_sec) == (10, 60, 10, 15)


def test_bad_numeric_setting_names_the_variable(monkeypatch):
    monkeypatch.setenv("DL_HEARTBEAT_SEC", "-1")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert err.value.variable == "DL_HEARTBEAT_SEC"


@pytest.mark.parametrize("raw", ["nope", '[{"queue":"a","concurrency":0}]', '[{"queue":"a","concurrency":1,"x":1}]'])
def test_worker_exits_nonzero_with_one_clear_line(raw, cli_env):
    env = dict(cli_env, WORKERS_JSON=raw)
    proc = run(["worker"], env)  # in-process: the settings are refused before anything starts
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("dataloader: configuration error: WORKERS_JSON:")
