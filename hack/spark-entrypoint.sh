#!/usr/bin/env bash
# Entry point of the WeaselDB Spark image (Dockerfile target `spark`). The Spark operator
# (and spark-submit in cluster mode) starts the driver pod with `driver ARGS...` and each
# executor pod with `executor`, passing everything else in SPARK_* environment variables.
# pyspark from PyPI ships no such script, so the image brings this one.
set -euo pipefail

: "${SPARK_HOME:?SPARK_HOME must point at the pyspark installation}"
classpath="${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}$SPARK_HOME/jars/*"

# spark-submit passes JVM options to executors as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ...
java_opts=()
while IFS='=' read -r name value; do
  [[ "$name" == SPARK_JAVA_OPT_* ]] && java_opts+=("$value")
done < <(env | sort -t_ -k4 -n)

role="${1:-}"
shift || true
case "$role" in
  driver)
    exec "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:-0.0.0.0}" \
      --deploy-mode client "$@"
    ;;
  executor)
    exec java "${java_opts[@]}" \
      -Xms"${SPARK_EXECUTOR_MEMORY:-1g}" -Xmx"${SPARK_EXECUTOR_MEMORY:-1g}" \
      -cp "$classpath" org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "${SPARK_EXECUTOR_POD_NAME:-}"
    ;;
  *)
    # Anything else runs as given (weaseldb compact, a shell, python ...).
    exec "$role" "$@"
    ;;
esac
