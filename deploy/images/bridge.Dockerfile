# syntax=docker/dockerfile:1
# The slurmbridge image: one image, two commands (`slurmbridge extender`, `slurmbridge webhook`).
# Build from the repository root:
#   docker build -f deploy/images/bridge.Dockerfile -t slurmbridge:dev .
# Untested on the project's machines (no Docker engine there); the same wheel build
# (`pip wheel --no-deps .`) and the chart that runs it are tested.

FROM python:3.11-slim AS build
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md ./
COPY bridge ./bridge
COPY extender ./extender
COPY admission ./admission
# Wheels of the package and every dependency; the runtime stage installs them offline.
RUN pip wheel --wheel-dir /wheels .

FROM python:3.11-slim
LABEL org.opencontainers.image.title="slurmbridge" \
      org.opencontainers.image.description="Slurm places selected Kubernetes pods: scheduler extender + admission webhook" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels slurmbridge \
 && groupadd --system --gid 10001 slurmbridge \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin slurmbridge
# Numeric user so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
WORKDIR /tmp
# 8888: extender (HTTP, /healthz, /readyz); 8443: webhook (HTTPS, /healthz).
EXPOSE 8888 8443
ENTRYPOINT ["slurmbridge"]
CMD ["--help"]
