# One image for the whole stack (docker-compose.yml): the cache server (the default command),
# the Dask scheduler and the Dask workers, which need client_lib importable to run the
# cache's load and store tasks.
#
#   docker build -t dask-result-cache .
#   docker run -p 127.0.0.1:8780:8780 -e RESULT_CACHE_PUBLISHED_HOST=127.0.0.1 \
#       -e RESULT_CACHE_REDIS_URL=redis://my-redis:6379/0 dask-result-cache
#
# The server binds 0.0.0.0 inside the container; without tokens it starts only if
# RESULT_CACHE_PUBLISHED_HOST says its port is published on loopback (or
# RESULT_CACHE_ALLOW_OPEN=1 says an open cache is intended).
#
# Without RESULT_CACHE_REDIS_URL the server starts its own embedded Redis under /data.
# No secrets in here: everything is configured by environment variables at run time.

# Stage 1 builds the wheel; the image installs that wheel, as a release would be installed,
# and keeps no source tree.
FROM python:3.11-slim AS wheel

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY cache_server ./cache_server
COPY client_lib ./client_lib
COPY storage ./storage
RUN python -m pip wheel --no-deps --wheel-dir /dist .

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Dependencies first, at the exact versions of requirements.lock (the project's, and
# dask[diagnostics]'s bokeh for the scheduler's dashboard; no test extras): this layer is
# rebuilt only when the lock changes, and clients install the same versions. Then the wheel
# without dependencies; `pip check` fails the build if the lock no longer satisfies it.
# The branch example of `dask-cache demo` ships in the wheel (cache_server.examples).
COPY requirements.lock /tmp/requirements.lock
RUN python -m pip install -r /tmp/requirements.lock \
    && rm /tmp/requirements.lock
COPY --from=wheel /dist /tmp/dist
RUN python -m pip install --no-deps /tmp/dist/*.whl \
    && python -m pip check \
    && rm -rf /tmp/dist

# The code stays owned by root (read-only for the server); only /data is writable.
RUN useradd --create-home --uid 1000 --shell /usr/sbin/nologin dask \
    && mkdir /data \
    && chown dask:dask /data
USER dask
WORKDIR /home/dask

ENV RESULT_CACHE_DATA_DIR=/data \
    RESULT_CACHE_PORT=8780
EXPOSE 8780

CMD ["dask-cache", "serve", "--host", "0.0.0.0"]
