package dev.leafjet.spark;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A frame's rows as Spark columns, read in place: each {@link ColumnVector} here looks values up
 * in the frame's bytes when Spark asks for a row (Spark's ColumnarToRow copies them into its
 * rows once), so turning a reply into a batch costs no pass over the rows, except the headers
 * of the messages that have some.
 */
final class FrameColumns {
  /** The six base columns: stream, seq, subject, timestamp, headers, data; then the JSON ones. */
  static ColumnarBatch batch(
      UTF8String stream, Frame f, int rows, boolean nullHeaders, JsonColumns json) {
    ColumnVector[] base = {
      new Constant(stream),
      new Longs(f, false),
      new Bytes(DataTypes.StringType, f.bytes, f.subjectOffsets, f.subjectValues, f.count),
      new Longs(f, true),
      Headers.of(f, nullHeaders),
      new Bytes(DataTypes.BinaryType, f.bytes, f.dataOffsets, f.dataValues, f.count),
    };
    if (json == null) {
      return new ColumnarBatch(base, rows);
    }
    ColumnVector[] cols = java.util.Arrays.copyOf(base, base.length + json.size() + 1);
    System.arraycopy(json.decode(f, rows), 0, cols, base.length, json.size() + 1);
    return new ColumnarBatch(cols, rows);
  }

  /** Read-only, no nulls: everything but the getters a column's type uses throws. */
  private abstract static class Base extends ColumnVector {
    Base(DataType type) {
      super(type);
    }

    @Override
    public void close() {}

    @Override
    public boolean hasNull() {
      return false;
    }

    @Override
    public int numNulls() {
      return 0;
    }

    @Override
    public boolean isNullAt(int rowId) {
      return false;
    }

    @Override
    public boolean getBoolean(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public byte getByte(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public short getShort(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public int getInt(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public long getLong(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public float getFloat(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public double getDouble(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public ColumnarArray getArray(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public ColumnarMap getMap(int ordinal) {
      throw new UnsupportedOperationException();
    }

    @Override
    public Decimal getDecimal(int rowId, int precision, int scale) {
      throw new UnsupportedOperationException();
    }

    @Override
    public UTF8String getUTF8String(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public byte[] getBinary(int rowId) {
      throw new UnsupportedOperationException();
    }

    @Override
    public ColumnVector getChild(int ordinal) {
      throw new UnsupportedOperationException();
    }
  }

  /** The stream's name, the same in every row. */
  static final class Constant extends Base {
    private final UTF8String value;

    Constant(UTF8String value) {
      super(DataTypes.StringType);
      this.value = value;
    }

    @Override
    public UTF8String getUTF8String(int rowId) {
      return value;
    }
  }

  /** seq (BIGINT) or timestamp (TIMESTAMP: microseconds; the frame has nanoseconds). */
  static final class Longs extends Base {
    private final Frame f;
    private final boolean stamp;

    Longs(Frame f, boolean stamp) {
      super(stamp ? DataTypes.TimestampType : DataTypes.LongType);
      this.f = f;
      this.stamp = stamp;
    }

    @Override
    public long getLong(int rowId) {
      return stamp ? Math.floorDiv(f.stampNanos(rowId), 1000L) : f.seq(rowId);
    }
  }

  /** A variable-width column of the frame: subject (STRING) or data (BINARY), or header keys. */
  static final class Bytes extends Base {
    private final byte[] b;
    private final int offsets;
    private final int values;
    private final boolean checkUtf8; // some byte is not ASCII: each string is checked

    Bytes(DataType type, byte[] b, int offsets, int values, int count) {
      super(type);
      this.b = b;
      this.offsets = offsets;
      this.values = values;
      boolean ascii = true;
      if (type == DataTypes.StringType) {
        int end = values + Frame.offset(b, offsets, count);
        for (int i = values; i < end && ascii; i++) {
          ascii = b[i] >= 0;
        }
      }
      this.checkUtf8 = !ascii;
    }

    @Override
    public UTF8String getUTF8String(int rowId) {
      int start = Frame.offset(b, offsets, rowId);
      int end = Frame.offset(b, offsets, rowId + 1);
      UTF8String s = UTF8String.fromBytes(b, values + start, end - start);
      // a subject that is no UTF-8 (the server keeps raw bytes): replaced, as the Python source does
      return checkUtf8 && !s.isValid() ? s.makeValid() : s;
    }

    @Override
    public byte[] getBinary(int rowId) {
      int start = Frame.offset(b, offsets, rowId);
      int end = Frame.offset(b, offsets, rowId + 1);
      return Arrays.copyOfRange(b, values + start, values + end);
    }
  }

  /**
   * headers MAP&lt;STRING,STRING&gt;: a message's own headers (the NATS header block's fields, the
   * last of a repeated name winning, as the Python source's dict does); an empty map, or null
   * with nullHeaders, for a message without any. Only the rows with a header block are parsed.
   */
  static final class Headers extends Base {
    // fields a direct get appends: the Python source makes them columns and removes them; a bulk
    // frame has none of its own, but a user header of one of these names is removed alike
    static final Set<String> META =
        Set.of(
            "Nats-Stream",
            "Nats-Subject",
            "Nats-Sequence",
            "Nats-Time-Stamp",
            "Nats-Num-Pending",
            "Nats-Last-Sequence");
    private static final ColumnVector EMPTY_KEYS = new OnHeapColumnVector(0, DataTypes.StringType);
    private static final ColumnarMap EMPTY = new ColumnarMap(EMPTY_KEYS, EMPTY_KEYS, 0, 0);

    private final boolean nullWhenNone;
    private final int[] start; // per row: first entry in keys/values, -1 when the row has none
    private final int[] length;
    private final ColumnVector keys;
    private final ColumnVector values;
    private final int nulls;

    private Headers(boolean nullWhenNone, int[] start, int[] length, ColumnVector k, ColumnVector v, int nulls) {
      super(DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType));
      this.nullWhenNone = nullWhenNone;
      this.start = start;
      this.length = length;
      this.keys = k;
      this.values = v;
      this.nulls = nulls;
    }

    static ColumnVector of(Frame f, boolean nullWhenNone) {
      int n = f.count;
      int[] start = null;
      int[] length = null;
      List<byte[]> ks = new ArrayList<>();
      List<byte[]> vs = new ArrayList<>();
      int nulls = n;
      if (f.headerBytes() > 0) {
        start = new int[n];
        length = new int[n];
        nulls = 0;
        for (int i = 0; i < n; i++) {
          int s = Frame.offset(f.bytes, f.headerOffsets, i);
          int e = Frame.offset(f.bytes, f.headerOffsets, i + 1);
          Map<String, String> own = e > s ? parse(f.bytes, f.headerValues + s, e - s) : Map.of();
          start[i] = ks.size();
          length[i] = own.size();
          if (own.isEmpty()) {
            nulls++;
          }
          for (Map.Entry<String, String> kv : own.entrySet()) {
            ks.add(kv.getKey().getBytes(StandardCharsets.UTF_8));
            vs.add(kv.getValue().getBytes(StandardCharsets.UTF_8));
          }
        }
      }
      OnHeapColumnVector k = new OnHeapColumnVector(Math.max(1, ks.size()), DataTypes.StringType);
      OnHeapColumnVector v = new OnHeapColumnVector(Math.max(1, vs.size()), DataTypes.StringType);
      for (int i = 0; i < ks.size(); i++) {
        k.putByteArray(i, ks.get(i));
        v.putByteArray(i, vs.get(i));
      }
      return new Headers(nullWhenNone, start, length, k, v, nullWhenNone ? nulls : 0);
    }

    /** "NATS/1.0\r\nName: value\r\n..." -> the fields but the META ones, in first-seen order. */
    static Map<String, String> parse(byte[] b, int at, int len) {
      String block = new String(b, at, len, StandardCharsets.UTF_8);
      String[] lines = block.split("\r\n", -1);
      Map<String, String> out = new LinkedHashMap<>();
      for (int i = 1; i < lines.length; i++) {
        int colon = lines[i].indexOf(':');
        if (colon < 0) {
          continue;
        }
        String name = lines[i].substring(0, colon).strip();
        if (!name.isEmpty() && !META.contains(name)) {
          out.put(name, lines[i].substring(colon + 1).strip());
        }
      }
      return out;
    }

    @Override
    public boolean hasNull() {
      return nulls > 0;
    }

    @Override
    public int numNulls() {
      return nulls;
    }

    @Override
    public boolean isNullAt(int rowId) {
      return nullWhenNone && (length == null || length[rowId] == 0);
    }

    @Override
    public ColumnarMap getMap(int rowId) {
      if (length == null || length[rowId] == 0) {
        return EMPTY;
      }
      return new ColumnarMap(keys, values, start[rowId], length[rowId]);
    }

    @Override
    public ColumnVector getChild(int ordinal) {
      return ordinal == 0 ? keys : values;
    }

    @Override
    public void close() {
      keys.close();
      values.close();
    }
  }

  private FrameColumns() {}
}
