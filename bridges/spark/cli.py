"""``leafjet spark aggregate ...`` and ``spark-submit bridges/spark/cli.py aggregate ...``.

Exit codes: 0 ok, 1 runtime failure (server, stream, Spark), 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bridges.spark.aggregate import AggregateConfig

SOURCE_FLAGS = {  # CLI flag -> source option
    "subject": "subject",
    "user": "user",
    "password": "password",
    "token": "token",
    "tls_ca": "tlsCaFile",
    "max_records_per_batch": "maxRecordsPerBatch",
    "start_seq": "startSeq",
    "start_time": "startTime",
    "fail_on_data_loss": "failOnDataLoss",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="leafjet spark", description="Spark jobs over leafjet streams")
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser(
        "aggregate", help="count/min/max/mean of a JSON field per subject and window -> Parquet"
    )
    a.add_argument("--servers", required=True, help="nats://host:port[,nats://...]")
    a.add_argument("--stream", required=True)
    a.add_argument("--field", default="temp", help="numeric JSON field of the payload (default temp)")
    a.add_argument("--window", default="1 minute", help='tumbling window, e.g. "1 minute"')
    a.add_argument("--output", required=True, help="Parquet output directory")
    a.add_argument("--mode", choices=("batch", "streaming"), default="batch")
    a.add_argument("--checkpoint", help="checkpoint directory (streaming)")
    a.add_argument("--available-now", action="store_true", help="streaming: process the backlog and stop")
    a.add_argument("--watermark", default="0 seconds", help="streaming watermark delay (default 0 seconds)")
    a.add_argument("--trigger-interval", default="5 seconds")
    a.add_argument("--subject", help="only messages matching this subject filter")
    a.add_argument("--user")
    a.add_argument("--password")
    a.add_argument("--token")
    a.add_argument("--tls-ca", help="CA file for tls:// servers")
    a.add_argument("--max-records-per-batch", help="streaming admission control")
    a.add_argument("--start-seq")
    a.add_argument("--start-time", help="ISO-8601 or epoch milliseconds")
    a.add_argument("--fail-on-data-loss", choices=("true", "false"))
    a.add_argument("--master", default="local[2]", help="Spark master when not under spark-submit")
    a.add_argument("--show", action="store_true", help="batch: print the aggregate")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits on usage errors and --help
        return int(e.code or 0) if e.code in (0, None) else 2
    if args.mode == "streaming" and not args.checkpoint:
        print("leafjet spark aggregate: --mode streaming needs --checkpoint DIR", file=sys.stderr)
        return 2
    options = {opt: str(getattr(args, flag)) for flag, opt in SOURCE_FLAGS.items() if getattr(args, flag)}
    cfg = AggregateConfig(
        servers=args.servers,
        stream=args.stream,
        field=args.field,
        window=args.window,
        output=args.output,
        mode=args.mode,
        checkpoint=args.checkpoint,
        available_now=args.available_now,
        watermark=args.watermark,
        trigger_interval=args.trigger_interval,
        options=options,
    )
    try:
        from bridges.spark.aggregate import run_batch, start_streaming
        from bridges.spark.session import quiet_session
    except ImportError as e:
        print(f"leafjet spark: {e}; install the 'spark' extra (pyspark, pyarrow)", file=sys.stderr)
        return 3
    spark = quiet_session("leafjet-spark-aggregate", master=args.master)
    try:
        if cfg.mode == "batch":
            result = run_batch(spark, cfg)
            if args.show:
                result.show(50, truncate=False)
            print(f"wrote {spark.read.parquet(cfg.output).count()} aggregate rows to {cfg.output}")
            return 0
        query = start_streaming(spark, cfg)
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        print(f"streaming aggregate in {cfg.output} (checkpoint {cfg.checkpoint})")
        return 0
    except Exception as e:  # rendered at the edge: one line naming what failed
        print(f"leafjet spark aggregate failed: {_one_line(e)}", file=sys.stderr)
        return 1


def _one_line(e: BaseException) -> str:
    text = str(e)
    for line in text.splitlines():
        if "LeafjetSourceError" in line or "Error:" in line:
            return line.strip()
    return text.splitlines()[0] if text else type(e).__name__


if __name__ == "__main__":  # spark-submit bridges/spark/cli.py aggregate --servers ... --stream ...
    sys.exit(main())
