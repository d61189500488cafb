package dev.leafjet.spark;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;

/**
 * A decoded bulk read frame (core/protocol/readframe.py, version 1): where each column starts in
 * the frame's bytes. Nothing is copied; every length and offset is checked before a column is
 * used, so a truncated or forged frame is a {@link LeafjetException}, never an index error later.
 *
 * <pre>
 * header  16 B   "LJRF", u16 version 1, u16 flags 0, u32 count, u32 reserved
 * seqs    count x u64; ts count x i64 (ns); then subject, headers, data: (count + 1) x i32
 * offsets and the bytes; every section padded to 8 bytes; all little-endian
 * </pre>
 */
final class Frame {
  static final VarHandle LONG = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
  static final VarHandle INT = MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.LITTLE_ENDIAN);

  final byte[] bytes;
  final int count;
  final int seqs; // byte position of the first sequence
  final int stamps;
  final int subjectOffsets;
  final int subjectValues;
  final int headerOffsets;
  final int headerValues;
  final int dataOffsets;
  final int dataValues;

  private Frame(byte[] b, int count, int[] at) {
    this.bytes = b;
    this.count = count;
    seqs = at[0];
    stamps = at[1];
    subjectOffsets = at[2];
    subjectValues = at[3];
    headerOffsets = at[4];
    headerValues = at[5];
    dataOffsets = at[6];
    dataValues = at[7];
  }

  long seq(int row) {
    return (long) LONG.get(bytes, seqs + 8 * row);
  }

  long stampNanos(int row) {
    return (long) LONG.get(bytes, stamps + 8 * row);
  }

  static int offset(byte[] b, int offsets, int row) {
    return (int) INT.get(b, offsets + 4 * row);
  }

  /** Bytes the header column holds in all (0: no message of the frame has headers). */
  int headerBytes() {
    return offset(bytes, headerOffsets, count);
  }

  private static int pad(long n) {
    return (int) (-n & 7);
  }

  static Frame decode(byte[] b, String where) {
    return decode(b, b.length, where);
  }

  /** The frame in the first ``length`` bytes of ``b`` (a reused buffer may be longer). */
  static Frame decode(byte[] b, int length, String where) {
    if (length < 16) {
      throw bad(where, "truncated frame: no header");
    }
    if (b[0] != 'L' || b[1] != 'J' || b[2] != 'R' || b[3] != 'F') {
      throw bad(where, "not a read frame (bad magic)");
    }
    int version = (b[4] & 0xff) | (b[5] & 0xff) << 8;
    int flags = (b[6] & 0xff) | (b[7] & 0xff) << 8;
    long count = Integer.toUnsignedLong((int) INT.get(b, 8));
    if (version != 1) {
      throw bad(where, "read frame version " + version + " is not supported (this reader knows 1)");
    }
    if (flags != 0) {
      throw bad(where, "read frame flags 0x" + Integer.toHexString(flags) + " are not supported");
    }
    if (count * 16 > length) {
      throw bad(where, "truncated frame: " + count + " rows in " + length + " bytes");
    }
    int n = (int) count;
    int[] at = new int[8];
    long p = 16;
    at[0] = (int) p;
    p += 8L * n;
    at[1] = (int) p;
    p += 8L * n;
    for (int col = 0; col < 3; col++) {
      long offsetsBytes = 4L * (n + 1);
      if (p + offsetsBytes > length) {
        throw bad(where, "truncated frame: " + COLUMNS[col] + " offsets");
      }
      int offs = (int) p;
      at[2 + 2 * col] = offs;
      p += offsetsBytes + pad(offsetsBytes);
      if (offset(b, offs, 0) != 0) {
        throw bad(where, COLUMNS[col] + " offsets do not start at 0");
      }
      int prev = 0;
      for (int i = 1; i <= n; i++) {
        int o = offset(b, offs, i);
        if (o < prev) {
          throw bad(where, COLUMNS[col] + " offsets decrease");
        }
        prev = o;
      }
      if (p + prev > length) {
        throw bad(where, "truncated frame: " + COLUMNS[col] + " bytes");
      }
      at[3 + 2 * col] = (int) p;
      p += prev + pad(prev);
    }
    if (p != length) {
      throw bad(where, (length - p) + " bytes after the frame");
    }
    Frame f = new Frame(b, n, at);
    long last = 0;
    for (int i = 0; i < n; i++) {
      long s = f.seq(i);
      if (Long.compareUnsigned(s, last) <= 0) {
        throw bad(where, "sequences are not increasing");
      }
      last = s;
    }
    return f;
  }

  private static final String[] COLUMNS = {"subject", "headers", "data"};

  private static LeafjetException bad(String where, String why) {
    return new LeafjetException("bad bulk read reply for " + where + ": " + why);
  }

  /**
   * A one-row frame of a message read by MSG.GET (one too large for a bulk reply), so it takes
   * the same path to columns as every other row.
   */
  static Frame single(long seq, long stampNanos, byte[] subject, byte[] headers, byte[] data) {
    int total = 16 + 16 + 3 * 8;
    total += subject.length + pad(subject.length) + headers.length + pad(headers.length);
    total += data.length + pad(data.length);
    byte[] b = new byte[total];
    b[0] = 'L';
    b[1] = 'J';
    b[2] = 'R';
    b[3] = 'F';
    b[4] = 1;
    INT.set(b, 8, 1);
    LONG.set(b, 16, seq);
    LONG.set(b, 24, stampNanos);
    int p = 32;
    for (byte[] v : new byte[][] {subject, headers, data}) {
      INT.set(b, p, 0);
      INT.set(b, p + 4, v.length);
      p += 8;
      System.arraycopy(v, 0, b, p, v.length);
      p += v.length + pad(v.length);
    }
    return decode(b, "a single message");
  }
}
