"""The Spark half of the README demo: batch-aggregate a stream, print a table, draw mean per device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bridges.spark.aggregate import AggregateConfig, run_batch


def run_demo(
    servers: str,
    stream: str,
    chart_path: str | Path,
    *,
    field: str = "temp",
    window: str = "1 minute",
    output: str | Path | None = None,
    spark: Any = None,
    options: dict[str, str] | None = None,
    print_table: bool = True,
) -> list[dict[str, Any]]:
    """Aggregate ``stream`` in batch, write a PNG of mean ``field`` per device per window, return the rows.

    Rows are dicts with the keys of ``aggregate.OUTPUT_COLUMNS``, ordered by window then subject.
    """
    if spark is None:
        from bridges.spark.session import quiet_session

        spark = quiet_session("leafjet-demo")
    cfg = AggregateConfig(
        servers=servers,
        stream=stream,
        field=field,
        window=window,
        output=str(output) if output else None,
        options=dict(options or {}),
    )
    rows = [r.asDict() for r in run_batch(spark, cfg).collect()]
    if print_table:
        print(format_table(rows, field))
    write_chart(rows, Path(chart_path), field, window)
    return rows


def format_table(rows: list[dict[str, Any]], field: str) -> str:
    width = max([28, *(len(r["subject"]) for r in rows)])
    head = (
        f"{'window start (UTC)':19s}  {'subject':{width}s} {'count':>6s} {'min':>9s} {'max':>9s} {'mean':>9s}"
    )
    lines = [f"{field} per device and window", head, "-" * len(head)]
    for r in rows:

        def num(x: Any) -> str:
            return "null" if x is None else f"{x:.2f}"

        lines.append(
            f"{r['window_start']:%Y-%m-%d %H:%M:%S}  {r['subject']:{width}s} {r['count']:>6d}"
            f" {num(r['min']):>9s} {num(r['max']):>9s} {num(r['mean']):>9s}"
        )
    return "\n".join(lines)


def write_chart(rows: list[dict[str, Any]], path: Path, field: str, window: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
    try:
        for subject in sorted({r["subject"] for r in rows}):
            mine = [r for r in rows if r["subject"] == subject and r["mean"] is not None]
            pts = [(r["window_start"], r["mean"]) for r in mine]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, marker="o", label=subject)
        ax.set_title(f"mean {field} per device, {window} windows")
        ax.set_xlabel("window start (UTC)")
        ax.set_ylabel(f"mean {field}")
        if rows:
            # beside the plot, so no line hides behind it
            ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.grid(True, alpha=0.3)
        from matplotlib.dates import DateFormatter

        ax.xaxis.set_major_formatter(DateFormatter("%H:%M:%S"))
        fig.autofmt_xdate()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, bbox_inches="tight")
    finally:
        plt.close(fig)
