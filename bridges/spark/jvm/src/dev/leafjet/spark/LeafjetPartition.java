package dev.leafjet.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** An inclusive sequence range of one stream, with everything a task needs to read it. */
final class LeafjetPartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  final ReadOptions opts;
  final long first;
  final long last;
  final JsonColumns json; // null: no jsonSchema

  LeafjetPartition(ReadOptions opts, long first, long last, JsonColumns json) {
    this.opts = opts;
    this.first = first;
    this.last = last;
    this.json = json;
  }
}
