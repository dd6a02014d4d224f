# One image for the four services and the operator: every container runs `weaseldb ...`
# (`weaseldb service NAME --config FILE` in database pods, `weaseldb operator` in the
# operator Deployment). Build with `make images`.
#
# Base pinned by version; pin the digest too where your registry policy asks for it:
#   docker buildx imagetools inspect python:3.11.14-slim-bookworm
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# --- build: a wheel of this project and its dependencies, in a venv
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/weaseldb
COPY pyproject.toml README.md ./
COPY weaseldb ./weaseldb
COPY services ./services
COPY operator/weaseldb_operator ./operator/weaseldb_operator
COPY spark/weaseldb_compaction ./spark/weaseldb_compaction
RUN /opt/weaseldb/bin/pip install . kopf==1.45.2

# --- runtime: the venv only, as an unprivileged user
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="weaseldb" \
      org.opencontainers.image.description="WeaselDB services and Kubernetes operator" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/weaseldb/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /opt/weaseldb /opt/weaseldb
RUN groupadd --system --gid 10001 weasel \
 && useradd --system --uid 10001 --gid weasel --home-dir /nonexistent --shell /usr/sbin/nologin weasel \
 && install -d -o weasel -g weasel /run/weasel
USER 10001:10001
EXPOSE 8080 8081 8082 8083
ENTRYPOINT []
CMD ["weaseldb", "--help"]
