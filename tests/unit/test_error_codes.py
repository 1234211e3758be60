"""One error vocabulary (issue 24): docs/errors.md names every code any face can produce, and the
CLI's exit codes follow the HTTP statuses (2 for what HTTP calls bad input)."""

from __future__ import annotations

import re
from pathlib import Path

import dataloader
from dataloader import exceptions
from dataloader.api.v1.models import HTTP_STATUS, ErrorCode

ERRORS_MD = Path(__file__).resolve().parents[2] / "docs" / "errors.md"


def documented_codes() -> dict[str, str]:
    """code -> its table row in docs/errors.md."""
    rows = re.findall(r"^\| `([a-z_]+)` \|(.*)$", ERRORS_MD.read_text(), flags=re.MULTILINE)
    return dict(rows)


def every_exception_code() -> dict[str, set[str]]:
    codes: dict[str, set[str]] = {}
    for name in dir(exceptions):
        value = getattr(exceptions, name)
        if isinstance(value, type) and issubclass(value, exceptions.DataloaderError) and value is not \
                exceptions.DataloaderError:
            codes.setdefault(value.code, set()).add(name)
    return codes


def test_every_code_is_documented_with_its_exception_and_http_status():
    documented = documented_codes()
    for code in ErrorCode:
        assert code.value in documented, code
        assert f"| {HTTP_STATUS[code]}" in documented[code.value], (code, documented[code.value])
    for code, names in every_exception_code().items():
        assert code in documented, code
        for name in names:
            assert f"`{name}`" in documented[code], (code, name)
            assert getattr(dataloader, name) is getattr(exceptions, name), f"{name} is not exported from dataloader"


def test_the_cli_exits_2_for_what_http_calls_bad_input():
    bad_input = {code.value for code in ErrorCode if HTTP_STATUS[code] in (400, 413, 415, 422)}
    # a processor that refused is a 422 over HTTP but may succeed later: a failed operation
    assert exceptions.INPUT_ERROR_CODES == bad_input - {"process_task_failed"} | {"config_error", "schema_mismatch"}
    for code, row in documented_codes().items():
        cells = [c.strip() for c in row.split("|")]
        exit_cell = cells[-2]
        if exit_cell.startswith(("1", "2")):
            assert exit_cell.startswith("2") == (code in exceptions.INPUT_ERROR_CODES), (code, exit_cell)


def test_schema_mismatch_is_one_class():
    from dataloader.storage import migrate

    assert migrate.SchemaMismatch is exceptions.SchemaMismatch is dataloader.SchemaMismatch
    assert issubclass(exceptions.SchemaMismatch, RuntimeError)


def test_a_filter_rule_over_several_fields_names_the_filter_once():
    from datetime import UTC, datetime

    import pytest

    from dataloader.jobs.search import parse_filter

    with pytest.raises(exceptions.InvalidJobRequest) as caught:
        parse_filter({"created_from": datetime(2030, 1, 1, tzinfo=UTC), "created_to": datetime(2020, 1, 1, tzinfo=UTC)})
    assert str(caught.value).startswith("filter: ") and "filter filter" not in str(caught.value)
