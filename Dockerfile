# Cohort: a standalone Kafka-protocol group coordinator.
#
#   docker build -t cohort .
#   docker run -d --name cohort -p 9092:9092 -p 9464:9464 -v cohort-data:/data \
#       -e COHORT_ADVERTISED_LISTENERS=broker.example.com:9092 cohort
#
# Any setting can be given as COHORT_<NAME> (e.g. COHORT_OFFSETS_RETENTION_MINUTES=1440)
# or as extra arguments after the image name (e.g. --group.initial.rebalance.delay.ms 0).
#
# Several coordinator processes (`--workers N`, one broker each on ports 9092, 9093, ...):
#   docker run -d -p 9092-9095:9092-9095 -p 9464:9464 -v cohort-data:/data \
#       -e COHORT_WORKERS=4 -e COHORT_ADVERTISED_LISTENERS=broker.example.com:9092 cohort
# (worker K advertises broker.example.com:9092+K; publish every worker's port).

# -- build: turn the project and its dependencies into wheels ------------------
FROM python:3.11-slim AS build
# A C compiler for the compiled request path (docs/compiled-path.md); the image has Python's headers.
RUN apt-get -o DPkg::Lock::Timeout=300 update -qq \
    && apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY protocol ./protocol
COPY coordinator ./coordinator
COPY client ./client
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels ".[console]"

# -- run: only the installed wheels, as an unprivileged user -------------------
FROM python:3.11-slim
COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir --no-compile /wheels/*.whl \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --user-group --home-dir /data --no-create-home --shell /usr/sbin/nologin cohort \
    && mkdir -p /data \
    && chown cohort:cohort /data
USER cohort
WORKDIR /data
VOLUME ["/data"]
EXPOSE 9092 9464
# The address clients are told to connect to: override with the host name they reach this container by.
ENV COHORT_ADVERTISED_LISTENERS=localhost:9092 \
    COHORT_WORKERS=1 \
    COHORT_METRICS_LISTEN=0.0.0.0:9464 \
    COHORT_SHUTDOWN_TIMEOUT_MS=8000 \
    PYTHONUNBUFFERED=1
# /health answers 200 once the offsets log is loaded, 503 while loading or stopping
# (on the metrics port, wherever COHORT_METRICS_LISTEN puts it).
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('COHORT_METRICS_LISTEN', ':9464').rsplit(':', 1)[1]; urllib.request.urlopen(f'http://127.0.0.1:{port}/health', timeout=2)"]
# Graceful stop (finish requests, fsync the log) within 8 s, inside `docker stop`'s default 10 s.
STOPSIGNAL SIGTERM
ENTRYPOINT ["cohort", "serve", "--listen", "0.0.0.0:9092", "--data-dir", "/data"]
