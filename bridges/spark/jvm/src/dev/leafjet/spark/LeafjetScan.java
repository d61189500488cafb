package dev.leafjet.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Planning, on the driver: the range to read (STREAM.INFO, startSeq/endSeq), whether the server
 * serves the bulk read API (``bulkRead``, or a probe), and the partitions (contiguous sequence
 * ranges, split as the Python source's ``split_range`` splits them). A read the JVM reader does not
 * do, and every micro-batch stream, is the Python source's: its scan, built through Spark's own
 * PythonDataSourceV2 under its second name (leafjet_python), so the result is exactly what the Python source gives.
 */
final class LeafjetScan implements Scan {
  /** The Python source's second name (bridges/spark/datasource.py PYTHON_NAME). */
  static final String PYTHON_NAME = "leafjet_python";

  private final StructType schema;
  private final CaseInsensitiveStringMap options;
  private final ReadOptions opts;

  LeafjetScan(StructType schema, CaseInsensitiveStringMap options) {
    this.schema = schema;
    this.options = options;
    this.opts = ReadOptions.parse(options);
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  private volatile String chosen = "not planned yet";

  @Override
  public String description() {
    return "LeafjetScan(stream=" + opts.stream + ", reader=" + chosen + ")";
  }

  @Override
  public Batch toBatch() {
    String why = opts.pythonOnly();
    if (why != null) {
      chosen = "python: " + why;
      return python(why).toBatch();
    }
    long first;
    long last;
    boolean bulk;
    NatsClient client;
    try {
      client = NatsClient.connect(opts);
    } catch (LeafjetException.TlsRequired e) {
      if ("jvm".equals(opts.reader)) {
        throw e;
      }
      chosen = "python: a server that requires TLS";
      return python("a server that requires TLS").toBatch();
    }
    try (NatsClient c = client) {
      StreamApi.Info info = StreamApi.info(c, opts);
      first = opts.startSeq == null ? 1 : opts.startSeq;
      last = opts.endSeq == null ? info.lastSeq() : Math.min(opts.endSeq, info.lastSeq());
      if (opts.startSeq != null) {
        StreamApi.checkDataLoss(opts, first, last, info.firstSeq());
      }
      first = Math.max(first, info.firstSeq());
      bulk = "true".equals(opts.bulkRead) || StreamApi.probe(c, opts);
    }
    if (!bulk) {
      if ("jvm".equals(opts.reader)) {
        throw new LeafjetException(
            "option reader=jvm, but " + opts.where() + " does not serve leafjet's bulk read API");
      }
      chosen = "python: a server without the bulk read API";
      return python("a server without the bulk read API").toBatch();
    }
    chosen = "jvm";
    JsonColumns json = LeafjetProvider.jsonColumns(schema);
    List<InputPartition> parts = new ArrayList<>();
    for (long[] r : splitRange(first, last, opts.numPartitions, opts.minPartitionSize)) {
      parts.add(new LeafjetPartition(opts, r[0], r[1], json));
    }
    if (parts.isEmpty()) {
      parts.add(new LeafjetPartition(opts, 1, 0, json)); // an empty range reads nothing
    }
    InputPartition[] planned = parts.toArray(new InputPartition[0]);
    return new Batch() {
      @Override
      public InputPartition[] planInputPartitions() {
        return planned;
      }

      @Override
      public PartitionReaderFactory createReaderFactory() {
        return new ReaderFactory();
      }
    };
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return python("streaming").toMicroBatchStream(checkpointLocation);
  }

  /** The Python source's scan for these options (registered as leafjet_python). */
  private Scan python(String why) {
    PythonDataSourceV2 ds = new PythonDataSourceV2();
    ds.setShortName(PYTHON_NAME);
    try {
      Table t = ds.getTable(schema, new Transform[0], options.asCaseSensitiveMap());
      return ((SupportsRead) t).newScanBuilder(options).build();
    } catch (RuntimeException e) {
      throw new LeafjetException(
          "the JVM reader hands "
              + why
              + " to the Python source '" + PYTHON_NAME + "', which is not usable here"
              + " (register it: bridges.spark.datasource.register(spark)): "
              + NatsClient.describe(e),
          e);
    }
  }

  /** ``split_range`` of bridges/spark/options.py: at most ``parts`` contiguous, disjoint ranges. */
  static List<long[]> splitRange(long first, long last, int parts, int minSize) {
    List<long[]> out = new ArrayList<>();
    if (last < first) {
      return out;
    }
    long span = last - first + 1;
    long bySize = -Math.floorDiv(-span, Math.max(1, minSize));
    long n = Math.max(1, Math.min(parts, bySize));
    long size = span / n;
    long extra = span % n;
    long lo = first;
    for (long i = 0; i < n; i++) {
      long hi = lo + size + (i < extra ? 1 : 0) - 1;
      out.add(new long[] {lo, hi});
      lo = hi + 1;
    }
    return out;
  }

  /** Columnar readers only: each reply frame is one ColumnarBatch. */
  static final class ReaderFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException("the leafjet JVM reader reads columnar batches only");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new BulkReader((LeafjetPartition) partition);
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }
  }
}
