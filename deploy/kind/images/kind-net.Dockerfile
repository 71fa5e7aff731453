# kind-net: the kind cluster's pod networking agent (images/kind-net.sh).  Build context: a
# folder holding kind-net.sh and the kubectl binary (deploy/kind/node-image.sh prepares it).
ARG BASE=debian:trixie-slim
FROM ${BASE}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 >/dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY kubectl kind-net.sh /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/kind-net.sh"]
