package dev.leafjet.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.github.luben.zstd.Zstd;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One partition's read through leafjet's bulk read API: each reply's frame becomes one
 * ColumnarBatch. Invariants as the Python source's (bridges/spark/DESIGN.md, 1 and 5):
 * unfiltered ranges in chunks of ``rowsPerArrowBatch`` sequences, 2 requests out (the server builds
 * the next frame while this task turns the last one into rows); a reply cut short by the byte
 * bound is continued before the next chunk; with a subject filter one request at a time from the
 * last covered + 1; a reply that covers nothing ends the read. A message too large for a reply is
 * read alone by MSG.GET. The lowest sequence the read did not return is checked against the
 * stream's first sequence at the end: below it means data loss. A partition whose first bulk
 * request is refused (an error reply: the server no longer serves the read API to us) reads its
 * range by STREAM.MSG.GET instead, one message per request, as the Python source falls back to
 * direct gets there.
 */
public final class BulkReader implements PartitionReader<ColumnarBatch> {
  static final String H_READ = "Leafjet-Read";
  static final String H_LAST = "Leafjet-Read-Last";
  static final String H_ENCODING = "Leafjet-Read-Encoding";
  private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(BulkReader.class);
  private static final int IN_FLIGHT = 2;
  private static final int MAX_BYTES = 8 << 20; // the server clamps it to its reply ceiling

  private record Ask(long lo, long hi, String token) {}

  private final ReadOptions opts;
  private final JsonColumns json;
  private final NatsClient client;
  private final UTF8String stream;
  private final long last;
  private final String subject;
  private final ArrayDeque<Ask> window = new ArrayDeque<>();
  private long nextLo;
  private boolean done;
  private boolean finished;
  private boolean answered; // some bulk request of this partition was answered with a frame
  private boolean byMsgGet; // the first bulk request was refused: the rest by STREAM.MSG.GET
  private ColumnarBatch current;
  private byte[] currentBuffer; // the current batch's frame bytes, when they are a reused buffer
  // data loss: the lowest sequence of the range not returned so far (-1: none missing)
  private long expected;
  private long gap = -1;

  BulkReader(LeafjetPartition p) {
    opts = p.opts;
    json = p.json;
    last = p.last;
    stream = UTF8String.fromString(opts.stream);
    subject = subject(opts);
    client = NatsClient.connect(opts);
    try {
      StreamApi.Info info = StreamApi.info(client, opts);
      nextLo = StreamApi.checkDataLoss(opts, p.first, last, info.firstSeq());
    } catch (RuntimeException e) {
      client.close();
      throw e;
    }
    expected = nextLo;
  }

  /**
   * One partition's read outside Spark (tests, tools): the options as the source takes them, the
   * inclusive range ``first..last``. The caller closes it.
   */
  public static BulkReader open(java.util.Map<String, String> options, long first, long last) {
    ReadOptions o = ReadOptions.parse(options);
    return new BulkReader(new LeafjetPartition(o, first, last, null));
  }

  static String subject(ReadOptions o) {
    return "$JS.API.LEAFJET.READ." + o.stream;
  }

  @Override
  public boolean next() {
    closeCurrent();
    while (!done) {
      Piece piece;
      try {
        piece = byMsgGet ? single(nextLo) : opts.subject != null ? nextFiltered() : nextChunk();
      } catch (NotServed e) {
        LOG.warn("{}; reading the range from {} by STREAM.MSG.GET instead", e.getMessage(), e.seq);
        dropWindow();
        nextLo = e.seq;
        byMsgGet = true;
        continue;
      }
      if (piece != null && piece.rows > 0) {
        see(piece.frame, piece.rows);
        current = FrameColumns.batch(stream, piece.frame, piece.rows, opts.nullHeaders, json);
        currentBuffer = piece.reused ? piece.frame.bytes : null;
        return true;
      }
    }
    finish();
    return false;
  }

  @Override
  public ColumnarBatch get() {
    return current;
  }

  @Override
  public void close() {
    closeCurrent();
    client.close();
  }

  private void closeCurrent() {
    if (current != null) {
      current.close();
      current = null;
    }
    // Spark is done with the batch once it asks for the next one (its own columnar readers reuse
    // their vectors the same way): the frame's buffer takes the next reply
    client.recycle(currentBuffer);
    currentBuffer = null;
  }

  /** The first bulk request was refused with an error reply: the server does not serve it to us. */
  private static final class NotServed extends LeafjetException {
    private static final long serialVersionUID = 1L;
    final long seq;

    NotServed(String message, long seq) {
      super(message);
      this.seq = seq;
    }
  }

  /** A reply's use: the frame's first ``rows`` rows are every stored message it covers in range. */
  private record Piece(Frame frame, int rows, boolean reused) {}

  /** The reply to a request from ``lo``: (last covered, frame); null frame = too large (10054). */
  private record Reply(long covered, Frame frame, boolean reused) {}

  private Piece nextChunk() {
    while (window.size() < IN_FLIGHT && nextLo <= last) {
      long hi = Math.min(last, nextLo + opts.rowsPerRequest - 1);
      window.add(new Ask(nextLo, hi, ask(nextLo, hi - nextLo + 1)));
      nextLo = hi + 1;
    }
    Ask a = window.poll();
    if (a == null) {
      done = true;
      return null;
    }
    Reply r = answer(a.lo, a.token);
    if (r.frame == null) { // too large: that one by MSG.GET, then on in bulk after it
      dropWindow();
      return single(a.lo);
    }
    if (r.covered < a.lo) { // the stream ends before the range (purged or replaced meanwhile)
      dropWindow();
      done = true;
      return null;
    }
    if (r.covered < a.hi) { // cut short by the byte bound: the rest of this chunk goes first
      window.addFirst(new Ask(r.covered + 1, a.hi, ask(r.covered + 1, a.hi - r.covered)));
    }
    return new Piece(r.frame, rowsUpTo(r, a.hi), r.reused);
  }

  private Piece nextFiltered() {
    if (nextLo > last) {
      done = true;
      return null;
    }
    long want = Math.min(opts.rowsPerRequest, last - nextLo + 1);
    long lo = nextLo;
    Reply r = answer(lo, ask(lo, want));
    if (r.frame == null) {
      return single(lo);
    }
    if (r.covered < lo) {
      done = true;
      return null;
    }
    nextLo = r.covered + 1;
    return new Piece(r.frame, rowsUpTo(r, last), r.reused);
  }

  private Piece single(long seq) {
    Frame f = StreamApi.msgGetNext(client, opts, seq);
    if (f == null || f.seq(0) > last) {
      done = true;
      return null;
    }
    if (f.seq(0) < seq) { // the read would go back (and round again): a forged or broken answer
      throw new LeafjetException(
          "bad STREAM.MSG.GET answer for " + opts.where() + ": message " + f.seq(0) + " asked from " + seq);
    }
    nextLo = f.seq(0) + 1;
    return new Piece(f, 1, false);
  }

  private void dropWindow() {
    for (Ask a : window) {
      client.forget(a.token);
    }
    window.clear();
  }

  private static int rowsUpTo(Reply r, long hi) {
    Frame f = r.frame;
    if (r.covered <= hi) {
      return f.count;
    }
    int lo = 0;
    int up = f.count; // the first row past hi, by bisection (sequences increase)
    while (lo < up) {
      int mid = (lo + up) >>> 1;
      if (f.seq(mid) <= hi) {
        lo = mid + 1;
      } else {
        up = mid;
      }
    }
    return lo;
  }

  private String ask(long seq, long maxMsgs) {
    StringBuilder b = new StringBuilder(128);
    b.append("{\"v\":1,\"seq\":").append(seq).append(",\"max_msgs\":").append(maxMsgs);
    b.append(",\"max_bytes\":").append(MAX_BYTES);
    if (opts.subject != null) {
      b.append(",\"filter\":[").append(StreamApi.quote(opts.subject)).append(']');
    }
    if (opts.wantsZstd) {
      b.append(",\"compress\":\"zstd\"");
    }
    b.append('}');
    return client.request(subject, b.toString().getBytes(StandardCharsets.UTF_8), replyLimit(), true);
  }

  /**
   * The most bytes a reply may have: what was asked for, or one message up to the server's
   * max_payload (the first message of a reply goes even past max_bytes), plus the frame's
   * framing. More is a broken or forged server: refused before it is allocated.
   */
  private int replyLimit() {
    return Math.max(MAX_BYTES, client.maxPayload) + NatsClient.FRAMING;
  }

  private Reply answer(long seq, String token) {
    NatsClient.Msg m = client.await(token);
    if (m == null) {
      throw new LeafjetException(
          "bulk read from " + seq + " timed out after " + opts.timeoutSeconds + "s for " + opts.where());
    }
    if (m.header(H_READ) == null) {
      byte[] body = m.exact();
      JsonNode err = StreamApi.error(body);
      if (err == null) {
        String start = new String(body, 0, Math.min(60, body.length), StandardCharsets.UTF_8);
        throw new LeafjetException(
            "bulk read from " + seq + " failed for " + opts.where() + ": unexpected reply " + start);
      }
      client.recycle(m.data); // the answer is parsed: its (reused) buffer takes the next reply
      int code = err.path("err_code").asInt();
      if (code == StreamApi.ERR_NOT_FOUND) {
        throw new LeafjetException.StreamNotFound(
            opts.where() + " not found: " + StreamApi.description(err));
      }
      if (code == StreamApi.ERR_TOO_LARGE) {
        answered = true;
        return new Reply(seq, null, false);
      }
      String text = "bulk read from " + seq + " failed for " + opts.where() + ": " + StreamApi.description(err);
      throw answered ? new LeafjetException(text) : new NotServed(text, seq);
    }
    long covered;
    try {
      covered = Long.parseLong(m.header(H_LAST));
    } catch (RuntimeException e) {
      throw new LeafjetException("bad bulk read reply from " + seq + " for " + opts.where() + ": no " + H_LAST);
    }
    boolean reused = true;
    Frame f;
    if ("zstd".equals(m.header(H_ENCODING))) {
      byte[] data = decompress(m.exact(), seq);
      client.recycle(m.data);
      reused = false;
      f = Frame.decode(data, opts.where());
    } else {
      f = Frame.decode(m.data, m.length, opts.where());
    }
    if (covered < seq - 1 || (f.count > 0 && (f.seq(0) < seq || f.seq(f.count - 1) > covered))) {
      throw new LeafjetException(
          "bad bulk read reply from "
              + seq
              + " for "
              + opts.where()
              + ": covers up to "
              + covered
              + " with "
              + f.count
              + " messages");
    }
    answered = true;
    return new Reply(covered, f, reused);
  }

  private byte[] decompress(byte[] data, long seq) {
    long size = Zstd.getFrameContentSize(data);
    if (size <= 0 || size > replyLimit()) {
      throw new LeafjetException(
          "bad bulk read reply from " + seq + " for " + opts.where() + ": compressed frame size " + size);
    }
    try {
      return Zstd.decompress(data, (int) size);
    } catch (RuntimeException e) {
      throw new LeafjetException(
          "bad bulk read reply from " + seq + " for " + opts.where() + ": compressed frame is corrupt", e);
    }
  }

  private void see(Frame f, int rows) {
    if (gap >= 0) {
      return;
    }
    long lo = f.seq(0);
    long hi = f.seq(rows - 1);
    if (lo != expected) {
      gap = expected;
    } else if (hi - lo + 1 != rows) {
      for (int i = 1; i < rows; i++) {
        if (f.seq(i) - f.seq(i - 1) > 1) {
          gap = f.seq(i - 1) + 1;
          break;
        }
      }
    }
    expected = hi + 1;
  }

  private void finish() {
    if (finished) {
      return;
    }
    finished = true;
    if (gap < 0 && expected <= last) {
      gap = expected;
    }
    if (gap >= 0 && opts.failOnDataLoss) {
      StreamApi.Info now = StreamApi.info(client, opts);
      StreamApi.checkDataLoss(opts, gap, last, now.firstSeq());
    }
  }
}
