# kube-proxy for the kind cluster, in nftables mode (deploy/kind/cluster.yaml): the nft tool
# it drives, conntrack for flushing stale UDP entries.  Build context: a folder with the
# kube-proxy binary (deploy/kind/node-image.sh prepares it).
ARG BASE=debian:trixie-slim
FROM ${BASE}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      nftables iptables conntrack ipset kmod >/dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY kube-proxy /usr/local/bin/kube-proxy
