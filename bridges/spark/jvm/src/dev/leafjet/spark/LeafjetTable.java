package dev.leafjet.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A stream as a table: batch reads here, micro-batches through the Python source (LeafjetScan). */
final class LeafjetTable implements SupportsRead {
  private final StructType schema;

  LeafjetTable(StructType schema) {
    this.schema = schema;
  }

  @Override
  public String name() {
    return "leafjet";
  }

  @Override
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return () -> new LeafjetScan(schema, options);
  }
}
