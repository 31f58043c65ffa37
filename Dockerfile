# One image for the whole stack (docker-compose.yml): the cache server (the default command),
# the Dask scheduler and the Dask workers, which need client_lib importable to run the
# cache's load and store tasks.
#
#   docker build -t dask-result-cache .
#   docker run -p 8780:8780 -e RESULT_CACHE_REDIS_URL=redis://my-redis:6379/0 dask-result-cache
#
# Without RESULT_CACHE_REDIS_URL the server starts its own embedded Redis under /data.
# No secrets in here: everything is configured by environment variables at run time.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Metadata first, so a code change does not reinstall the dependencies.
WORKDIR /app
COPY pyproject.toml README.md ./
COPY cache_server ./cache_server
COPY client_lib ./client_lib
COPY storage ./storage
COPY examples ./examples

# Editable, so `dask-cache demo` finds examples/ beside the packages. No test extras;
# dask[diagnostics] adds bokeh for the scheduler's dashboard.
RUN python -m pip install -e . "dask[diagnostics]"

# The code stays owned by root (read-only for the server); only /data is writable.
RUN useradd --create-home --uid 1000 --shell /usr/sbin/nologin dask \
    && mkdir /data \
    && chown dask:dask /data
USER dask

ENV RESULT_CACHE_DATA_DIR=/data \
    RESULT_CACHE_PORT=8780
EXPOSE 8780

CMD ["dask-cache", "serve", "--host", "0.0.0.0"]
