"""Values shared by the API tests."""

WORKER_QUEUE = "api"
OTHER_QUEUE = "nobody-serves-this"
MAX_ARGS_BYTES = 8192
TRIGGER = "/api/v1/jobs/trigger"


def job_body(**overrides: object) -> dict[str, object]:
    body: dict[str, object] = {"queue": WORKER_QUEUE, "task": "dl.noop", "lock_key": "k1"}
    body.update(overrides)
    return body
