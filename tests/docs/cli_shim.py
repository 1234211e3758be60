"""`dataloader` for the docs' shell blocks: hands its arguments to the test process, which runs the
command in-process (tests.support.cli.invoke) against the test database, and answers as the command
would (its stdout, stderr and exit code). A shell block then runs as written — variables, pipes,
`$(...)` — without an interpreter start and dataloader's import per command. Standard library only:
it runs on the system python."""

import json
import os
import socket
import sys


def main() -> int:
    request = {"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items()
                                             if k.startswith(("DL_", "WORKERS_JSON", "OTEL_"))}}
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(os.environ["DL_DOCS_CLI_SOCKET"])
        conn.sendall(json.dumps(request).encode() + b"\n")
        answer = json.loads(conn.makefile().readline())
    sys.stdout.write(answer["stdout"])
    sys.stderr.write(answer["stderr"])
    return answer["code"]


if __name__ == "__main__":
    sys.exit(main())
