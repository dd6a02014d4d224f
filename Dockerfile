# One image for the four services and the operator: every container runs `weaseldb ...`
# (`weaseldb service NAME --config FILE` in database pods, `weaseldb operator` in the
# operator Deployment). Build with `make images`.
#
# A second target, `spark`, is the compaction image the operator's SparkApplications run
# (JRE 17, pyspark, the S3A jar set, this project, an entrypoint for Spark's driver and
# executor roles):  docker build --target spark -t weaseldb-spark .
#
# Base pinned by version; pin the digest too where your registry policy asks for it:
#   docker buildx imagetools inspect python:3.11.14-slim-bookworm
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# --- build: a wheel of this project and its dependencies, in a venv
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/weaseldb
# Dependencies first, from pyproject.toml alone, so a source change rebuilds one layer.
COPY pyproject.toml README.md hack/requirements-of.py ./
RUN /opt/weaseldb/bin/python requirements-of.py pyproject.toml >requirements.txt \
 && /opt/weaseldb/bin/pip install -r requirements.txt kopf==1.45.2
COPY weaseldb ./weaseldb
COPY weaseldb_cli ./weaseldb_cli
COPY services ./services
COPY operator/weaseldb_operator ./operator/weaseldb_operator
COPY spark/weaseldb_compaction ./spark/weaseldb_compaction
RUN /opt/weaseldb/bin/pip install --no-deps .

# --- spark-build: the project with pyspark, and the S3A jars resolved from Maven Central
# with the same Ivy files as `make tools` (hack/s3a), never the 686 MB AWS SDK bundle.
FROM ${PYTHON_IMAGE} AS spark-build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
RUN python -m venv /opt/weaseldb
COPY pyproject.toml README.md hack/requirements-of.py ./
RUN /opt/weaseldb/bin/python requirements-of.py pyproject.toml spark >requirements.txt \
 && /opt/weaseldb/bin/pip install -r requirements.txt
COPY hack/s3a ./hack/s3a
RUN spark_home="$(/opt/weaseldb/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" \
 && java -jar "$(ls "$spark_home"/jars/ivy-*.jar | head -n 1)" \
      -settings hack/s3a/ivysettings.xml -ivy hack/s3a/ivy.xml -cache /tmp/ivy \
      -confs default -types jar bundle \
      -retrieve "/opt/s3a-jars/[artifact]-[revision](-[classifier]).[ext]" \
 && cp /opt/s3a-jars/*.jar "$spark_home/jars/" \
 && rm -rf /tmp/ivy
COPY weaseldb ./weaseldb
COPY weaseldb_cli ./weaseldb_cli
COPY services ./services
COPY operator/weaseldb_operator ./operator/weaseldb_operator
COPY spark/weaseldb_compaction ./spark/weaseldb_compaction
RUN /opt/weaseldb/bin/pip install --no-deps .

# --- spark: what the SparkApplication's driver and executor pods run
FROM ${PYTHON_IMAGE} AS spark
LABEL org.opencontainers.image.title="weaseldb-spark" \
      org.opencontainers.image.description="WeaselDB compaction job on Spark" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/jre-17
COPY --from=spark-build /opt/weaseldb /opt/weaseldb
COPY --from=spark-build /opt/s3a-jars /opt/s3a-jars
RUN ln -s "$(/opt/weaseldb/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark
COPY spark/weaseldb_compaction/main.py /opt/weaseldb/compaction/main.py
COPY hack/spark-entrypoint.sh /opt/entrypoint.sh
ENV PATH=/opt/weaseldb/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    JAVA_HOME=/usr/lib/jvm/jre-17 SPARK_HOME=/opt/spark \
    PYSPARK_PYTHON=/opt/weaseldb/bin/python PYSPARK_DRIVER_PYTHON=/opt/weaseldb/bin/python \
    WEASELDB_S3A_JARS=/opt/s3a-jars
RUN groupadd --system --gid 10001 weasel \
 && useradd --system --uid 10001 --gid weasel --home-dir /tmp --shell /usr/sbin/nologin weasel
WORKDIR /tmp
USER 10001:10001
ENTRYPOINT ["/usr/bin/tini", "-s", "--", "/opt/entrypoint.sh"]

# --- runtime (the default target): the venv only, as an unprivileged user
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
