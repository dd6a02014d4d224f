# The Kubeflow Spark operator's controller for the kind tier (hack/e2e/images.sh builds
# it; the context holds only the `spark-operator` binary built through the Go module
# proxy). The controller submits applications with $SPARK_HOME/bin/spark-submit, so the
# image carries a JRE 17 from Debian and pyspark's install directory as SPARK_HOME.
# Classic builder only (no BuildKit features).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
FROM ${PYTHON_IMAGE}
ARG PYSPARK_VERSION
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# (man1 must exist for the JRE's update-alternatives in slim images)
RUN mkdir -p /usr/share/man/man1 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/spark-venv \
 && /opt/spark-venv/bin/pip install "pyspark==${PYSPARK_VERSION}" \
 && ln -s "$(/opt/spark-venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark \
 && test -x /opt/spark/bin/spark-submit
ENV SPARK_HOME=/opt/spark PATH=/opt/spark-venv/bin:$PATH
RUN groupadd --system --gid 185 spark \
 && useradd --system --uid 185 --gid spark --home-dir /home/spark --create-home --shell /usr/sbin/nologin spark
COPY spark-operator /usr/bin/spark-operator
USER 185:185
ENTRYPOINT ["/usr/bin/tini", "-s", "--", "/usr/bin/spark-operator"]
