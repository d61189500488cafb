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
 * the last wins. Each payload is read first by a strict scanner over its bytes ({@link #fast}) that
 * takes only the plain cases -- one flat object, ASCII names and strings without escapes,
 * numbers without exponents of at most 15 significant digits (18 for integer columns), true,
 * false, null -- and gives exactly the values Jackson would; anything else (nesting, escapes,
 * non-ASCII bytes, exponents, NaN, any syntax error) is parsed again by Jackson's streaming
 * parser, which holds the semantics. The scanner allocates nothing per payload; a Jackson
 * parser costs an object graph each.
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
  private transient byte[][] nameBytes; // the names in UTF-8, for the scanner (built on first use)

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
    if (nameBytes == null) {
      byte[][] nb = new byte[n][];
      for (int i = 0; i < n; i++) {
        nb[i] = names[i].getBytes(StandardCharsets.UTF_8);
      }
      nameBytes = nb;
    }
    Scan sc = new Scan(n);
    for (int row = 0; row < rows; row++) {
      int s = Frame.offset(f.bytes, f.dataOffsets, row);
      int e = Frame.offset(f.bytes, f.dataOffsets, row + 1);
      if (fast(f.bytes, f.dataValues + s, f.dataValues + e, sc)) {
        sc.commit(f.bytes, kinds, out, corrupt, row);
        continue;
      }
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

  // a field's state in one payload, as the scanner saw it
  private static final byte ABSENT = 0;
  private static final byte NULL = 1;
  private static final byte VALUE = 2;
  private static final byte WRONG = 3; // present with a value its column's type does not take

  /** One payload's fields as the scanner read them (reused for every payload of a batch). */
  private static final class Scan {
    final byte[] state;
    final double[] doubles;
    final long[] longs; // integers, booleans (0/1), timestamps (us)
    final int[] at; // a string's bytes in the frame
    final int[] len;

    Scan(int n) {
      state = new byte[n];
      doubles = new double[n];
      longs = new long[n];
      at = new int[n];
      len = new int[n];
    }

    /** The row's columns: all null and corrupt when some field has the wrong type. */
    void commit(byte[] b, Kind[] kinds, WritableColumnVector[] out, WritableColumnVector corrupt, int row) {
      boolean bad = false;
      for (byte st : state) {
        bad |= st == WRONG;
      }
      corrupt.putBoolean(row, bad);
      for (int i = 0; i < kinds.length; i++) {
        WritableColumnVector c = out[i];
        if (bad || state[i] != VALUE) {
          c.putNull(row);
          continue;
        }
        switch (kinds[i]) {
          case STRING -> c.putByteArray(row, b, at[i], len[i]);
          case DOUBLE -> c.putDouble(row, doubles[i]);
          case FLOAT -> c.putFloat(row, (float) doubles[i]);
          case LONG, TIMESTAMP -> c.putLong(row, longs[i]);
          case INT -> c.putInt(row, (int) longs[i]);
          case SHORT -> c.putShort(row, (short) longs[i]);
          case BOOLEAN -> c.putBoolean(row, longs[i] != 0);
          default -> throw new IllegalStateException(kinds[i].toString());
        }
      }
    }
  }

  private static final double[] POW10 = new double[23]; // exact: 10^22 is the last one a double holds

  static {
    POW10[0] = 1;
    for (int i = 1; i < POW10.length; i++) {
      POW10[i] = POW10[i - 1] * 10;
    }
  }

  private static boolean space(byte c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
  }

  private static int skipSpace(byte[] b, int i, int end) {
    while (i < end && space(b[i])) {
      i++;
    }
    return i;
  }

  private static boolean digit(byte c) {
    return c >= '0' && c <= '9';
  }

  /**
   * The payload ``b[from, end)`` read by the scanner into ``sc``: true when it is a plain flat
   * object whose values the scanner took (``sc`` then holds the row), false when Jackson must
   * decide (it may still be a good row). Never true for anything Jackson would read otherwise.
   */
  private boolean fast(byte[] b, int from, int end, Scan sc) {
    java.util.Arrays.fill(sc.state, ABSENT);
    int i = skipSpace(b, from, end);
    if (i >= end || b[i] != '{') {
      return false;
    }
    i = skipSpace(b, i + 1, end);
    if (i < end && b[i] == '}') {
      return skipSpace(b, i + 1, end) == end;
    }
    while (true) {
      if (i >= end || b[i] != '"') {
        return false;
      }
      int ns = i + 1;
      int ne = ns;
      while (ne < end && b[ne] != '"') {
        byte c = b[ne];
        if (c == '\\' || c < 0x20) { // an escape, a control byte, or not ASCII (negative)
          return false;
        }
        ne++;
      }
      if (ne >= end) {
        return false;
      }
      int field = field(b, ns, ne - ns);
      i = skipSpace(b, ne + 1, end);
      if (i >= end || b[i] != ':') {
        return false;
      }
      i = skipSpace(b, i + 1, end);
      i = value(b, i, end, field, sc);
      if (i < 0) {
        return false;
      }
      i = skipSpace(b, i, end);
      if (i >= end) {
        return false;
      }
      if (b[i] == '}') {
        return skipSpace(b, i + 1, end) == end;
      }
      if (b[i] != ',') {
        return false;
      }
      i = skipSpace(b, i + 1, end);
    }
  }

  /** The column of the name ``b[at, at + len)``, -1 for a field the schema does not name. */
  private int field(byte[] b, int at, int len) {
    byte[][] nb = nameBytes;
    for (int k = 0; k < nb.length; k++) {
      if (java.util.Arrays.equals(nb[k], 0, nb[k].length, b, at, at + len)) {
        return k;
      }
    }
    return -1;
  }

  /** One value from ``i`` into field ``k`` (-1: skipped); where it ends, or -1: Jackson decides. */
  private int value(byte[] b, int i, int end, int k, Scan sc) {
    if (i >= end) {
      return -1;
    }
    Kind kind = k < 0 ? null : kinds[k];
    byte c = b[i];
    if (c == '"') {
      int s = i + 1;
      int e = s;
      while (e < end && b[e] != '"') {
        byte x = b[e];
        if (x == '\\' || x < 0x20) {
          return -1;
        }
        e++;
      }
      if (e >= end) {
        return -1;
      }
      if (kind == Kind.STRING) {
        set(sc, k, VALUE);
        sc.at[k] = s;
        sc.len[k] = e - s;
      } else if (kind == Kind.TIMESTAMP) {
        Long us = isoMicros(new String(b, s, e - s, StandardCharsets.US_ASCII));
        set(sc, k, us == null ? WRONG : VALUE);
        sc.longs[k] = us == null ? 0 : us;
      } else if (kind != null) {
        set(sc, k, WRONG);
      }
      return e + 1;
    }
    if (c == 't' || c == 'f' || c == 'n') {
      String word = c == 't' ? "true" : c == 'f' ? "false" : "null";
      int e = i + word.length();
      if (e > end) {
        return -1;
      }
      for (int j = 1; j < word.length(); j++) {
        if (b[i + j] != word.charAt(j)) {
          return -1;
        }
      }
      if (kind == null) {
        return e;
      }
      if (c == 'n') {
        set(sc, k, NULL);
      } else if (kind == Kind.BOOLEAN) {
        set(sc, k, VALUE);
        sc.longs[k] = c == 't' ? 1 : 0;
      } else if (kind == Kind.STRING) { // Jackson's text of the token: the word itself
        set(sc, k, VALUE);
        sc.at[k] = i;
        sc.len[k] = e - i;
      } else {
        set(sc, k, WRONG);
      }
      return e;
    }
    if (c != '-' && !digit(c)) {
      return -1; // an object, an array, NaN, or no JSON
    }
    // a number, by JSON's grammar less the exponent: -?(0|[1-9][0-9]*)(.[0-9]+)?
    int s = i;
    boolean negative = c == '-';
    if (negative) {
      i++;
    }
    if (i >= end || !digit(b[i])) {
      return -1;
    }
    long m = 0;
    int digits = 0;
    if (b[i] == '0') {
      i++;
      if (i < end && digit(b[i])) {
        return -1; // a leading zero: Jackson refuses it
      }
    } else {
      while (i < end && digit(b[i])) {
        m = m * 10 + (b[i] - '0');
        digits++;
        i++;
        if (digits > 18) {
          return -1;
        }
      }
    }
    int fraction = 0;
    if (i < end && b[i] == '.') {
      i++;
      if (i >= end || !digit(b[i])) {
        return -1;
      }
      while (i < end && digit(b[i])) {
        if (m != 0 || b[i] != '0') {
          digits++;
        }
        m = m * 10 + (b[i] - '0');
        fraction++;
        i++;
        if (digits > 18 || fraction > 22) {
          return -1;
        }
      }
    }
    if (i < end && (b[i] == 'e' || b[i] == 'E')) {
      return -1;
    }
    boolean integer = fraction == 0; // no '.': Jackson's VALUE_NUMBER_INT
    if (kind == null) {
      return i;
    }
    switch (kind) {
      case STRING -> { // Jackson's text of a number token is the token as written
        set(sc, k, VALUE);
        sc.at[k] = s;
        sc.len[k] = i - s;
      }
      case DOUBLE, FLOAT -> {
        if (digits > 15) {
          return -1; // past what one exact division rounds right
        }
        // an integer token is read as a long, then widened (so -0 is 0.0, as Jackson gives it);
        // m and 10^fraction are exact doubles, so their quotient is the correctly rounded value
        double q = m / POW10[fraction];
        double d = integer ? (double) (negative ? -m : m) : (negative ? -q : q);
        set(sc, k, VALUE);
        sc.doubles[k] = d;
      }
      case LONG, INT, SHORT -> {
        if (!integer) {
          return -1; // 1.0 is an integer, 1.5 is not: Jackson's path has the rules
        }
        long x = negative ? -m : m;
        long bound = kind == Kind.LONG ? Long.MIN_VALUE : (kind == Kind.INT ? -(1L << 31) : -(1L << 15));
        set(sc, k, x >= bound && x <= -(bound + 1) ? VALUE : WRONG);
        sc.longs[k] = x;
      }
      case TIMESTAMP -> {
        if (!integer || digits > 12) {
          return -1;
        }
        set(sc, k, VALUE);
        sc.longs[k] = (negative ? -m : m) * 1_000_000L;
      }
      case BOOLEAN -> set(sc, k, WRONG);
      default -> throw new IllegalStateException(kind.toString());
    }
    return i;
  }

  /** A repeated field: the last occurrence wins, as in Jackson's path (and Python's dict). */
  private static void set(Scan sc, int k, byte state) {
    sc.state[k] = state;
  }

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
