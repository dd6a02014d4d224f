"""The Kubeflow Spark operator's controller runs in the cluster without its webhook and
really submits what it is given: a SparkApplication leads to spark-submit (the JRE and
pyspark's SPARK_HOME in the controller image) creating the driver pod. Running the
compaction job on it is the Spark scenario's business; here the driver's image is only
the controller's own."""

from __future__ import annotations

from typing import Any

from tests.e2e import KIND_TIER
from tests.support.kind import KindCluster

pytestmark = KIND_TIER

NAME = "pi"


def spark_application(namespace: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "type": "Python",
            "mode": "cluster",
            "sparkVersion": "4.0.0",
            "image": image,
            "imagePullPolicy": "Never",
            "mainApplicationFile": "local:///opt/spark/examples/src/main/python/pi.py",
            "restartPolicy": {"type": "Never"},
            "driver": {"coreRequest": "50m", "memory": "512m", "serviceAccount": "default"},
            "executor": {"instances": 1, "coreRequest": "50m", "memory": "512m"},
        },
    }


def test_controller_submits_a_spark_application(
    spark_operator: KindCluster, images: dict[str, str], namespace: str
) -> None:
    cluster = spark_operator
    cluster.apply(spark_application(namespace, images["spark-operator"]))

    def reasons() -> set[str]:
        events = cluster.get_all("events", namespace)
        return {e["reason"] for e in events if e["involvedObject"]["name"] == NAME}

    cluster.wait_for(
        lambda: reasons() & {"SparkApplicationSubmitted", "SparkApplicationSubmissionFailed"},
        180,
        "spark-submit by the controller",
        namespace,
    )
    app = cluster.get("sparkapplication", NAME, namespace)
    assert "SparkApplicationSubmissionFailed" not in reasons(), app["status"]
    assert app["status"]["submissionAttempts"] == 1
    driver = cluster.get("pod", app["status"]["driverInfo"]["podName"], namespace)
    assert driver["metadata"]["labels"]["spark-role"] == "driver"
    assert driver["spec"]["containers"][0]["image"] == images["spark-operator"]
    # The controller follows the driver it created (this image has no Spark entrypoint,
    # so the driver itself fails: the state moves on from SUBMITTED).
    cluster.wait_for(
        lambda: reasons() & {"SparkDriverRunning", "SparkDriverFailed", "SparkDriverCompleted"},
        120,
        "the controller following the driver pod",
        namespace,
    )
