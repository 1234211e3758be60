"""The CLI's tests share the fixture of the jobs patterns' tests (tests/jobs/conftest.py) that
test_patterns.py, their CLI face, asks for."""

from tests.jobs.conftest import runs

__all__ = ["runs"]
