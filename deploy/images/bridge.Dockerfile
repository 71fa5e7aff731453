# The slurmbridge image: one image, two commands (`slurmbridge extender`, `slurmbridge webhook`).
# Build from the repository root:
#   docker build -f deploy/images/bridge.Dockerfile -t slurmbridge:dev .
# BASE: any image with Python >= 3.11 and its venv module (default: the public python:3.11-slim).
# Without a registry, deploy/images/build.sh builds it on the local Debian base image.
# Works with the classic builder too: no `# syntax=` line, no RUN --mount.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
# The dependencies first, from pyproject.toml alone: this layer survives code changes.  The base
# ones and the [server] extra's (the base alone is kubectl slurmbridge's).
RUN python3 -m venv /opt/slurmbridge \
 && python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["server"]))' > /tmp/requirements.txt \
 && /opt/slurmbridge/bin/pip install -r /tmp/requirements.txt
COPY bridge ./bridge
COPY extender ./extender
COPY admission ./admission
COPY slurmbridge_cli ./slurmbridge_cli
# Then the package itself, into the same virtual environment (copied whole below).
RUN /opt/slurmbridge/bin/pip install --no-deps . \
 && /opt/slurmbridge/bin/slurmbridge --help >/dev/null

FROM ${BASE}
LABEL org.opencontainers.image.title="slurmbridge" \
      org.opencontainers.image.description="Slurm places selected Kubernetes pods: scheduler extender + admission webhook" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/slurmbridge/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY --from=build /opt/slurmbridge /opt/slurmbridge
RUN groupadd --system --gid 10001 slurmbridge \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin slurmbridge
# Numeric user so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
WORKDIR /tmp
# 8888: extender (HTTP, /healthz, /readyz); 8443: webhook (HTTPS, /healthz).
EXPOSE 8888 8443
ENTRYPOINT ["slurmbridge"]
CMD ["--help"]
