package dev.leafjet.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Format {@code leafjet} on the JVM: batch reads of a leafjet stream through its bulk read API,
 * columnar (a DataSource V2 whose partitions hand Spark ColumnarBatches over the reply frames).
 * Found by Spark's ServiceLoader when the jar is on the classpath (spark.jars), before the Python
 * source of the same name; whatever it does not do itself (streaming, jsonSchema, time ranges,
 * TLS, a server without the bulk read API) it hands to that Python source (see LeafjetScan).
 */
public final class LeafjetProvider implements TableProvider, DataSourceRegister {
  static final String BASE_DDL =
      "stream STRING, seq BIGINT, subject STRING, timestamp TIMESTAMP, headers MAP<STRING,STRING>, data BINARY";

  @Override
  public String shortName() {
    return "leafjet";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    ReadOptions.parse(options); // the options are validated when the query is defined, as in Python
    String json = options.get("jsonSchema");
    if (json == null || json.isBlank()) {
      return StructType.fromDDL(BASE_DDL);
    }
    StructType schema = StructType.fromDDL(BASE_DDL + ", " + json.strip() + ", _corrupt BOOLEAN");
    jsonColumns(schema); // an unsupported column type is refused here, with the Python source's text
    return schema;
  }

  /** The JSON columns of a source schema (after the 6 base columns, before _corrupt); null: none. */
  static JsonColumns jsonColumns(StructType schema) {
    java.util.Set<String> base = java.util.Set.of(StructType.fromDDL(BASE_DDL).fieldNames());
    StructType json = new StructType();
    for (org.apache.spark.sql.types.StructField f : schema.fields()) {
      if (!base.contains(f.name()) && !f.name().equals(JsonColumns.CORRUPT)) {
        json = json.add(f);
      }
    }
    return json.fields().length == 0 ? null : JsonColumns.of(json);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new LeafjetTable(schema);
  }
}
