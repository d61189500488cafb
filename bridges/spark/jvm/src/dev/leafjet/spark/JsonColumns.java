package dev.leafjet.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import java.io.IOException;
import java.io.Serializable;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeParseException;
import java.util.HashMap;
import java.util.Locale;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * jsonSchema: the payloads' JSON fields as typed columns and {@code _corrupt}, with the Python
 * source's semantics (bridges/spark/json_columns.py, its per-row rules): PERMISSIVE, a payload that
 * is not a JSON object or a present field of the wrong type gives nulls in all JSON columns of the
 * row and {@code _corrupt = true}; a missing field or a JSON null is only null; a repeated field:
 * the last wins. One streaming parse per payload (Jackson), no tree.
 */
final class JsonColumns implements Serializable {
  private static final long serialVersionUID = 1L;
  static final String CORRUPT = "_corrupt";
  private static final JsonFactory FACTORY =
      JsonFactory.builder().enable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS).build();
  private static final double TWO_63 = 9.223372036854775808E18;

  enum Kind {
    STRING,
    DOUBLE,
    FLOAT,
    LONG,
    INT,
    SHORT,
    BOOLEAN,
    TIMESTAMP
  }

  private final String[] names;
  private final Kind[] kinds;
  private final DataType[] types;
  private final HashMap<String, Integer> index; // a field's column, for every payload of every batch

  private JsonColumns(String[] names, Kind[] kinds, DataType[] types) {
    this.names = names;
    this.kinds = kinds;
    this.types = types;
    index = new HashMap<>(names.length * 2);
    for (int i = 0; i < names.length; i++) {
      index.put(names[i], i);
    }
  }

  /** The JSON fields of a jsonSchema DDL; an unsupported type is refused as the Python source does. */
  static JsonColumns of(StructType schema) {
    StructField[] fs = schema.fields();
    String[] names = new String[fs.length];
    Kind[] kinds = new Kind[fs.length];
    DataType[] types = new DataType[fs.length];
    for (int i = 0; i < fs.length; i++) {
      DataType t = fs[i].dataType();
      names[i] = fs[i].name();
      types[i] = t;
      kinds[i] = kindOf(fs[i].name(), t);
    }
    return new JsonColumns(names, kinds, types);
  }

  private static Kind kindOf(String name, DataType t) {
    if (t == DataTypes.StringType) {
      return Kind.STRING;
    } else if (t == DataTypes.DoubleType) {
      return Kind.DOUBLE;
    } else if (t == DataTypes.FloatType) {
      return Kind.FLOAT;
    } else if (t == DataTypes.LongType) {
      return Kind.LONG;
    } else if (t == DataTypes.IntegerType) {
      return Kind.INT;
    } else if (t == DataTypes.ShortType) {
      return Kind.SHORT;
    } else if (t == DataTypes.BooleanType) {
      return Kind.BOOLEAN;
    } else if (t == DataTypes.TimestampType) {
      return Kind.TIMESTAMP;
    }
    throw new IllegalArgumentException(
        "jsonSchema column '"
            + name
            + "' has type "
            + t.simpleString()
            + "; supported: STRING, DOUBLE, FLOAT, BIGINT, INT, SMALLINT, BOOLEAN, TIMESTAMP");
  }

  int size() {
    return names.length;
  }

  /** The columns of ``rows`` payloads of the frame, then {@code _corrupt}. */
  WritableColumnVector[] decode(Frame f, int rows) {
    int n = names.length;
    WritableColumnVector[] out = new WritableColumnVector[n + 1];
    for (int i = 0; i < n; i++) {
      out[i] = new OnHeapColumnVector(Math.max(1, rows), types[i]);
    }
    WritableColumnVector corrupt = new OnHeapColumnVector(Math.max(1, rows), DataTypes.BooleanType);
    out[n] = corrupt;
    Object[] values = new Object[n];
    for (int row = 0; row < rows; row++) {
      int s = Frame.offset(f.bytes, f.dataOffsets, row);
      int e = Frame.offset(f.bytes, f.dataOffsets, row + 1);
      java.util.Arrays.fill(values, null);
      boolean bad = !parse(f.bytes, f.dataValues + s, e - s, values);
      for (int i = 0; i < n && !bad; i++) {
        bad = values[i] == BAD;
      }
      corrupt.putBoolean(row, bad);
      for (int i = 0; i < n; i++) {
        Object v = bad ? null : values[i];
        if (v == null) {
          out[i].putNull(row);
        } else {
          put(out[i], kinds[i], row, v);
        }
      }
    }
    return out;
  }

  private static final Object BAD = new Object();

  /** One payload's fields into ``values`` (BAD for one that does not fit); false: not an object. */
  private boolean parse(byte[] b, int at, int len, Object[] values) {
    try (JsonParser p = FACTORY.createParser(b, at, len)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        return false;
      }
      JsonToken t;
      while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
        Integer i = index.get(p.currentName());
        JsonToken v = p.nextToken();
        if (i == null) {
          p.skipChildren();
        } else {
          values[i] = value(p, v, kinds[i]);
        }
      }
      if (t != JsonToken.END_OBJECT) {
        return false;
      }
      return p.nextToken() == null; // nothing after the object
    } catch (IOException | RuntimeException e) {
      return false;
    }
  }

  private static Object value(JsonParser p, JsonToken t, Kind kind) throws IOException {
    if (t == JsonToken.VALUE_NULL) {
      return null;
    }
    switch (kind) {
      case STRING:
        if (t == JsonToken.VALUE_STRING) {
          return p.getText();
        }
        if (t == JsonToken.START_OBJECT || t == JsonToken.START_ARRAY) {
          return NatsClient.JSON.writeValueAsString(NatsClient.JSON.readTree(p)); // compact
        }
        return p.getText(); // a number or a bool as its JSON text
      case DOUBLE:
      case FLOAT:
        if (t == JsonToken.VALUE_NUMBER_INT || t == JsonToken.VALUE_NUMBER_FLOAT) {
          return p.getDoubleValue();
        }
        return skipBad(p, t);
      case LONG:
      case INT:
      case SHORT:
        return integer(p, t, kind);
      case BOOLEAN:
        if (t == JsonToken.VALUE_TRUE || t == JsonToken.VALUE_FALSE) {
          return t == JsonToken.VALUE_TRUE;
        }
        return skipBad(p, t);
      case TIMESTAMP:
        if (t == JsonToken.VALUE_NUMBER_INT) {
          BigInteger us = p.getBigIntegerValue().multiply(BigInteger.valueOf(1_000_000));
          return us.bitLength() < 64 ? (Object) us.longValue() : BAD;
        }
        if (t == JsonToken.VALUE_NUMBER_FLOAT) {
          double us = p.getDoubleValue() * 1_000_000;
          return Double.isFinite(us) && us > -TWO_63 && us < TWO_63 ? (Object) (long) us : BAD;
        }
        if (t == JsonToken.VALUE_STRING) {
          Long us = isoMicros(p.getText());
          return us == null ? BAD : us;
        }
        return skipBad(p, t);
      default:
        throw new IllegalStateException(kind.toString());
    }
  }

  private static Object skipBad(JsonParser p, JsonToken t) throws IOException {
    if (t == JsonToken.START_OBJECT || t == JsonToken.START_ARRAY) {
      p.skipChildren();
    }
    return BAD;
  }

  private static Object integer(JsonParser p, JsonToken t, Kind kind) throws IOException {
    long bound = kind == Kind.LONG ? Long.MIN_VALUE : (kind == Kind.INT ? -(1L << 31) : -(1L << 15));
    if (t == JsonToken.VALUE_NUMBER_INT) {
      BigInteger v = p.getBigIntegerValue();
      if (v.bitLength() >= 64) {
        return BAD;
      }
      long x = v.longValue();
      return x >= bound && x <= -(bound + 1) ? (Object) x : BAD;
    }
    if (t == JsonToken.VALUE_NUMBER_FLOAT) { // 1.0 and 1e2 are integers (Python's float.is_integer)
      double d = p.getDoubleValue();
      if (!Double.isFinite(d) || d != Math.rint(d) || d < -TWO_63 || d >= TWO_63) {
        return BAD;
      }
      long x = (long) d;
      return x >= bound && x <= -(bound + 1) ? (Object) x : BAD;
    }
    return skipBad(p, t);
  }

  /** An ISO-8601 date-time (naive: UTC; 'Z' or an offset) or date, as epoch microseconds. */
  static Long isoMicros(String text) {
    String s = text.strip();
    if (s.length() > 10 && s.charAt(10) == ' ') {
      s = s.substring(0, 10) + 'T' + s.substring(11);
    }
    if (s.endsWith("Z") || s.endsWith("z")) {
      s = s.substring(0, s.length() - 1) + "+00:00";
    }
    try {
      if (s.length() == 10) {
        return LocalDate.parse(s).atStartOfDay(ZoneOffset.UTC).toEpochSecond() * 1_000_000L;
      }
      OffsetDateTime odt;
      try {
        odt = OffsetDateTime.parse(s);
      } catch (DateTimeParseException e) {
        odt = LocalDateTime.parse(s).atOffset(ZoneOffset.UTC);
      }
      return Math.addExact(
          Math.multiplyExact(odt.toEpochSecond(), 1_000_000L), odt.getNano() / 1000L);
    } catch (DateTimeParseException | ArithmeticException e) {
      return null;
    }
  }

  private static void put(WritableColumnVector c, Kind kind, int row, Object v) {
    switch (kind) {
      case STRING -> c.putByteArray(row, ((String) v).getBytes(StandardCharsets.UTF_8));
      case DOUBLE -> c.putDouble(row, (Double) v);
      case FLOAT -> c.putFloat(row, (float) (double) (Double) v);
      case LONG, TIMESTAMP -> c.putLong(row, (Long) v);
      case INT -> c.putInt(row, (int) (long) (Long) v);
      case SHORT -> c.putShort(row, (short) (long) (Long) v);
      case BOOLEAN -> c.putBoolean(row, (Boolean) v);
      default -> throw new IllegalStateException(kind.toString().toLowerCase(Locale.ROOT));
    }
  }
}
