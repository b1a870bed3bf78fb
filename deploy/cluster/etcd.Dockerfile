# etcd from Debian's etcd-server package (3.4), the version Cohort's tests and demo use.
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends etcd-server && rm -rf /var/lib/apt/lists/*
EXPOSE 2379 2380
ENTRYPOINT ["etcd"]
