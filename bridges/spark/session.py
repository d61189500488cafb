"""A quiet local SparkSession with the leafjet source registered (tests, the CLI, the demo, the bench).

The settings are the ones measured in the shared Spark guide: workers run this interpreter (which has
pyarrow and this project), no UI, no progress bars, 2 shuffle partitions (frozen into streaming
checkpoints), UTC, and log4j at error level through a generated config file.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

LOG4J2 = """\
status = error
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def prepare_environment() -> None:
    """Environment the JVM and its Python workers inherit; call before the first session starts."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(REPO) not in paths:  # workers must import bridges.spark even when the project is not installed
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *[p for p in paths if p]])


def jvm_reader_jar() -> Path | None:
    """The JVM reader's jar (scripts/build_spark_reader), or None when it is not built.
    ``LEAFJET_SPARK_JVM=0`` hides it (the Python source then reads everything)."""
    jar = REPO / "build" / "spark" / "leafjet-spark.jar"
    if os.environ.get("LEAFJET_SPARK_JVM", "1") == "0" or not jar.is_file():
        return None
    return jar


def build_jvm_reader() -> bool:
    """Build the JVM reader's jar when a JDK is there (scripts/build_spark_reader: a no-op when it is
    up to date); whether it built. For the tests and the bench, which build it before a session."""
    import shutil
    import subprocess

    if shutil.which("javac") is None:
        return False
    env = {**os.environ, "PYTHON": sys.executable}
    return (
        subprocess.run([str(REPO / "scripts" / "build_spark_reader")], env=env, check=False).returncode == 0
    )


def quiet_session(
    app: str = "leafjet-spark",
    *,
    master: str = "local[2]",
    tmp_dir: str | Path | None = None,
    conf: dict[str, str] | None = None,
    jvm_reader: bool = True,
) -> Any:
    """Get or create the session (under spark-submit the submitted config wins) and register ``leafjet``.

    With ``jvm_reader`` and the jar built, the JVM reader is on the classpath: Spark then finds
    format ``leafjet`` there first, and it reads batches itself and hands the rest (streaming,
    jsonSchema, ...) to the Python source registered under the same name (DESIGN.md)."""
    prepare_environment()
    from pyspark.sql import SparkSession

    from bridges.spark.datasource import register

    base = Path(tmp_dir) if tmp_dir else Path(tempfile.mkdtemp(prefix="leafjet-spark-"))
    base.mkdir(parents=True, exist_ok=True)
    log4j = base / "log4j2.properties"
    log4j.write_text(LOG4J2)
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j}"
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "1g",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.local.dir": str(base / "local"),
        "spark.sql.warehouse.dir": str(base / "warehouse"),
        **(conf or {}),
    }
    jar = jvm_reader_jar() if jvm_reader else None
    if jar is not None and "spark.jars" not in settings:
        settings["spark.jars"] = str(jar)
    builder = SparkSession.builder.appName(app)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # set by spark-submit, whose --master must win
        builder = builder.master(master)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
