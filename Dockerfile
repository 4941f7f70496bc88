# The rhosynth image. One image runs every production process:
#   rhosynth migrate   one-shot, before the API starts
#   rhosynth serve     the HTTP API (the default command)
#   rhosynth worker    a Celery worker that runs release jobs and the recovery loop
# docker-compose.yml wires them to PostgreSQL and Redis.
#
# This file has not been built in CI: the machines the project is developed and tested on have no
# Docker engine (see README, "Status and known limits").

# --- build: turn the source tree into a wheel --------------------------------------------------
FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /src
COPY pyproject.toml README.md ./
COPY app/ app/
COPY workers/ workers/
COPY engine/ engine/
COPY migrations/ migrations/

# The wheel holds the packages app, workers, engine and migrations (with migrations/versions/*.py
# as package data). alembic.ini is not in it and is not needed: `rhosynth migrate` points Alembic
# at the installed `migrations` package (app/cli.py, run_migrations).
RUN pip wheel --no-deps --wheel-dir /wheels .

# --- runtime -----------------------------------------------------------------------------------
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# A fixed, unprivileged uid/gid, so files on the shared storage volume have the same owner in the
# api and worker containers.
RUN groupadd --system --gid 10001 rhosynth \
    && useradd --system --uid 10001 --gid rhosynth --home-dir /var/lib/rhosynth \
        --no-create-home --shell /usr/sbin/nologin rhosynth \
    && mkdir -p /var/lib/rhosynth/storage \
    && chown -R rhosynth:rhosynth /var/lib/rhosynth

# Runtime dependencies only: the [test] extra (pytest, mypy, ruff, ...) is not installed.
COPY --from=build /wheels/ /tmp/wheels/
RUN pip install /tmp/wheels/*.whl && rm -rf /tmp/wheels

USER rhosynth
WORKDIR /var/lib/rhosynth

# Production mode also needs RHOSYNTH_DATABASE_URL, RHOSYNTH_BROKER_URL and RHOSYNTH_SECRET_KEY;
# they come from the environment (docker-compose.yml), never from the image.
ENV RHOSYNTH_HOME=/var/lib/rhosynth \
    RHOSYNTH_STORAGE_DIR=/var/lib/rhosynth/storage \
    RHOSYNTH_HOST=0.0.0.0 \
    RHOSYNTH_PORT=8000

EXPOSE 8000
CMD ["rhosynth", "serve", "--host", "0.0.0.0", "--port", "8000"]
