"""The Spark session and the Parquet side of a store (`file://` for a directory store,
`s3a://` through the cached S3A jar set for S3).

On Kubernetes the SparkApplication sets master, resources and `hadoopConf`; `local_session`
is for `weaseldb compact`, the tests and the benchmark.
"""

from __future__ import annotations

import glob
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from pyspark.sql import SparkSession

from weaseldb.runtime.stores import url_credentials

#: Where `bash hack/tools.sh s3a-jars` (make tools) puts the S3A jar set; the Spark image
#: sets WEASELDB_S3A_JARS to its own copy.
S3A_JARS_ENV = "WEASELDB_S3A_JARS"
DEFAULT_S3A_JARS = Path.home() / ".cache/weaseldb/s3a-jars"


class SparkSetupError(RuntimeError):
    """Spark cannot start here (no Java, no S3A jars for an S3 store)."""


def s3a_jars() -> list[str]:
    directory = Path(os.environ.get(S3A_JARS_ENV) or DEFAULT_S3A_JARS)
    return sorted(glob.glob(str(directory / "*.jar")))


@dataclass(frozen=True)
class ParquetPlace:
    """How Spark reaches the objects of a store: a URL base and Hadoop settings."""

    base: str  # URL of the database prefix, ending in "/"
    hadoop: dict[str, str]

    def url(self, key: str) -> str:
        return self.base + key


def parquet_place(store_url: str) -> ParquetPlace:
    if store_url.startswith("dir:"):
        root = Path(store_url.removeprefix("dir:")).resolve()
        return ParquetPlace(f"file://{root}/", {})
    if store_url.startswith("s3://"):
        parts = urlsplit(store_url)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        prefix = parts.path.strip("/")
        return ParquetPlace(
            f"s3a://{parts.netloc}/{prefix + '/' if prefix else ''}", s3a_settings(query, store_url)
        )
    raise SparkSetupError(f"compaction needs a dir: or s3:// store, not {store_url!r}")


def s3a_settings(query: dict[str, str], store_url: str) -> dict[str, str]:
    settings = {
        "fs.s3a.path.style.access": "true",
        "fs.s3a.endpoint.region": query.get("region", "us-east-1"),
        "fs.s3a.input.stream.type": "classic",
        "fs.s3a.committer.magic.enabled": "false",
    }
    if query.get("endpoint"):
        settings["fs.s3a.endpoint"] = query["endpoint"]
        settings["fs.s3a.connection.ssl.enabled"] = str(query["endpoint"].startswith("https"))
    # Keys from this process's environment (a Secret via envFrom on Kubernetes), read per
    # run: the JVM's own environment was fixed when the session started. `credentials=NAME`
    # in the store URL names the variables (weaseldb.runtime.stores.named_credentials).
    keys = _keys(store_url)
    if keys is not None:
        settings["fs.s3a.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        )
        settings["fs.s3a.access.key"], settings["fs.s3a.secret.key"] = keys
    return settings


def _keys(store_url: str) -> tuple[str, str] | None:
    try:
        return url_credentials(store_url)
    except ValueError as e:
        raise SparkSetupError(str(e)) from e


def bucket_of(place: ParquetPlace) -> str | None:
    """The S3 bucket of an s3a:// place (None for file://)."""
    if not place.base.startswith("s3a://"):
        return None
    return urlsplit(place.base).netloc


def per_bucket(places: list[ParquetPlace]) -> dict[str, str]:
    """Hadoop settings for a job that touches several stores (restore: a source and a
    destination, maybe on other endpoints with other keys): each S3 store's settings as
    `fs.s3a.bucket.BUCKET.*` keys, which S3A prefers to the global ones for that bucket.
    Two stores in one bucket must agree (a bucket has one set of settings)."""
    settings: dict[str, str] = {}
    for place in places:
        bucket = bucket_of(place)
        if bucket is None:
            continue
        for key, value in place.hadoop.items():
            scoped = f"fs.s3a.bucket.{bucket}." + key.removeprefix("fs.s3a.")
            if settings.get(scoped, value) != value:
                raise SparkSetupError(
                    f"two stores in bucket {bucket} with different settings ({key}): "
                    "Spark reaches a bucket one way"
                )
            settings[scoped] = value
    return settings


def use_store(spark: SparkSession, place: ParquetPlace) -> None:
    """Point this session's Hadoop configuration at the store (per run: tests share one
    session across stores)."""
    use_settings(spark, place.hadoop)


def use_settings(spark: SparkSession, settings: dict[str, str]) -> None:
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in settings.items():
        hadoop.set(key, value)
        spark.conf.set(key, value)


def check_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin/java").exists():
        return
    if any(Path(d, "java").exists() for d in os.environ.get("PATH", "").split(os.pathsep)):
        return
    raise SparkSetupError(
        "Java was not found: Spark needs a Java 17 runtime "
        "(apt-get install openjdk-17-jre-headless, or set JAVA_HOME)"
    )


def local_session(
    master: str = "local[*]",
    *,
    local_dir: str | None = None,
    driver_memory: str = "2g",
    shuffle_partitions: int = 8,
) -> SparkSession:
    """A session on this machine: Python workers run this interpreter, loopback only, no
    UI, the S3A jars on the classpath when they were fetched."""
    check_java()
    # py4j logs every gateway connection it closes at INFO: noise after a command's last line.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName("weaseldb-compaction")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
    )
    jars = s3a_jars()
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    if local_dir:
        builder = builder.config("spark.local.dir", local_dir)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def configure_job(spark: SparkSession) -> None:
    """Settings every run needs, whatever started the session."""
    spark.conf.set("spark.sql.parquet.compression.codec", "zstd")
    spark.conf.set("spark.sql.files.maxRecordsPerFile", "0")
    spark.sparkContext._jsc.hadoopConfiguration().set(
        "mapreduce.fileoutputcommitter.marksuccessfuljobs", "false"
    )
