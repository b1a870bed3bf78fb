"""One local SparkSession for the whole Spark suite, and a real `cohort serve` per test.

The environment must be set before pyspark starts the JVM: the Python workers the
JVM launches must be this venv's interpreter (pyarrow, the cohort package), stay on
loopback, and find the example source module by name (cloudpickle pickles classes
from modules by reference).  Starting a JVM costs ~5 s and the first Python data
source query ~5 s more, so the session is shared and each test brings its own
checkpoint, output directory, group and coordinator.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(EXAMPLES), str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
)
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

from cohort_process import CohortServer  # noqa: E402  the one launcher of `cohort serve` (tests/)

import pytest  # noqa: E402

QUIET_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession

    from cohort.client.spark import register
    from kafka_shaped_source import KafkaShapedSource

    log4j = tmp_path_factory.mktemp("spark-conf") / "log4j2.properties"
    log4j.write_text(QUIET_LOG4J)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("cohort-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    session.dataSource.register(KafkaShapedSource)
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture
def stop_queries(spark):
    """Stops any query a test leaves running (a failed assertion must not leak a query)."""
    yield
    for query in spark.streams.active:
        query.stop()


@pytest.fixture
def cohort_server(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    server = CohortServer(data_dir).start()
    yield server
    server.stop()


@pytest.fixture
def admin(cohort_server):
    """kafka-python's admin client: a real third-party reader of the committed offsets."""
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=cohort_server.bootstrap, request_timeout_ms=10000)
    yield client
    client.close()

