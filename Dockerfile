# dataloader: the HTTP API + workers + reaper (`dataloader serve`), or workers only (`dataloader worker`).
#
#   docker build -t dataloader .
#   docker run --rm -p 8000:8000 dataloader                       # embedded PostgreSQL in /var/lib/dataloader
#   docker run --rm -p 8000:8000 -e DL_DB_DSN=postgresql://… dataloader
#   docker run --rm -e DL_DB_DSN=postgresql://… dataloader worker  # no HTTP (disable the HEALTHCHECK)
#
# No secrets are baked in: DL_DB_DSN and DL_API_TOKEN come from the environment at run time
# (see .env.example). BASE_IMAGE must be a Debian-based image with python3 ≥ 3.11 and its venv module.
ARG BASE_IMAGE=python:3.11-slim

# --- build: the wheel of this project, installed with its dependencies into /opt/venv -------------
FROM ${BASE_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python3 -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY src ./src
RUN /opt/venv/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/venv/bin/pip install /wheels/dataloader-*.whl \
 && /opt/venv/bin/dataloader --help > /dev/null

# --- runtime: the venv, tini as PID 1, a non-root user owning the data directory -----------------
FROM ${BASE_IMAGE} AS runtime
# tini reaps the processes the embedded PostgreSQL leaves to PID 1 and forwards SIGTERM.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 dataloader \
 && useradd --system --uid 10001 --gid dataloader --home-dir /var/lib/dataloader \
            --shell /usr/sbin/nologin dataloader \
 && install -d -o dataloader -g dataloader -m 0700 /var/lib/dataloader
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DL_HOST=0.0.0.0 \
    DL_PORT=8000 \
    DL_DATA_DIR=/var/lib/dataloader/pgdata \
    DL_LOG_FORMAT=json \
    XDG_RUNTIME_DIR=/tmp
USER dataloader:dataloader
WORKDIR /var/lib/dataloader
# Only used by the embedded PostgreSQL (DL_DB_DSN unset); mount a volume here to keep its data.
VOLUME ["/var/lib/dataloader"]
EXPOSE 8000
# Liveness of `dataloader serve` (GET /health answers without touching the database).
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('DL_PORT', '8000'), timeout=4)"]
# SIGTERM drains running jobs for up to DL_SHUTDOWN_TIMEOUT_SEC (30 s): give `docker stop` -t 40.
STOPSIGNAL SIGTERM
ENTRYPOINT ["tini", "--", "dataloader"]
CMD ["serve"]
