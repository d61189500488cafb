"""The aggregation job: per subject (device) and time window, count/min/max/mean of a numeric JSON field.

Windows are over the stream timestamp (the time the leaf agent stored the message), which does not
decrease with the sequence. So in streaming a watermark of 0 drops nothing: every micro-batch holds later
sequences, hence later-or-equal timestamps, than the batches before it.

Streaming writes with watermark + append mode to the Parquet file sink: the sink's ``_spark_metadata``
log and the checkpoint together make the output exactly-once across restarts (a batch is re-planned over
the same sequence range and its files are committed once). A window is written when the watermark passes
its end, i.e. once a later message arrives.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

OUTPUT_COLUMNS = ("subject", "window_start", "window_end", "count", "min", "max", "mean", "bad_rows")


@dataclass(frozen=True, slots=True)
class AggregateConfig:
    servers: str
    stream: str
    field: str = "temp"
    window: str = "1 minute"
    output: str | None = None
    mode: str = "batch"  # batch | streaming
    checkpoint: str | None = None
    available_now: bool = False
    watermark: str = "0 seconds"
    trigger_interval: str = "5 seconds"
    options: dict[str, str] = dataclasses.field(
        default_factory=dict
    )  # extra source options (subject, user, ...)


def read_source(spark: Any, cfg: AggregateConfig, *, streaming: bool) -> Any:
    reader = spark.readStream if streaming else spark.read
    reader = (
        reader.format("leafjet")
        .option("servers", cfg.servers)
        .option("stream", cfg.stream)
        .option("jsonSchema", f"`{cfg.field}` DOUBLE")
    )
    for k, v in cfg.options.items():
        reader = reader.option(k, v)
    return reader.load()


def aggregate(df: Any, value: str, window: str) -> Any:
    """count/min/max/mean of ``value`` per subject and tumbling window; bad payloads counted in bad_rows."""
    from pyspark.sql import functions as F

    v = F.col(f"`{value}`")
    return (
        df.groupBy(F.col("subject"), F.window("timestamp", window).alias("w"))
        .agg(
            F.count(v).alias("count"),
            F.min(v).alias("min"),
            F.max(v).alias("max"),
            F.avg(v).alias("mean"),
            F.sum(F.col("_corrupt").cast("long")).alias("bad_rows"),
        )
        .select(
            "subject",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "count",
            "min",
            "max",
            "mean",
            "bad_rows",
        )
    )


def run_batch(spark: Any, cfg: AggregateConfig) -> Any:
    """The aggregate as a DataFrame; written to ``cfg.output`` (Parquet, overwrite) when given."""
    result = aggregate(read_source(spark, cfg, streaming=False), cfg.field, cfg.window)
    result = result.orderBy("window_start", "subject")
    if cfg.output:
        result.write.mode("overwrite").parquet(cfg.output)
    return result


def start_streaming(spark: Any, cfg: AggregateConfig) -> Any:
    """Start the streaming aggregation into ``cfg.output``; returns the StreamingQuery."""
    if not cfg.output or not cfg.checkpoint:
        raise ValueError("streaming needs an output directory and a checkpoint directory")
    df = read_source(spark, cfg, streaming=True).withWatermark("timestamp", cfg.watermark)
    writer = (
        aggregate(df, cfg.field, cfg.window)
        .writeStream.format("parquet")
        .outputMode("append")
        .option("path", cfg.output)
        .option("checkpointLocation", cfg.checkpoint)
        .queryName(f"leafjet-aggregate-{cfg.stream}")
    )
    writer = (
        writer.trigger(availableNow=True)
        if cfg.available_now
        else writer.trigger(processingTime=cfg.trigger_interval)
    )
    return writer.start()
