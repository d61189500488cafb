package dev.leafjet.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.Base64;

/** The JetStream API calls the reader makes besides bulk reads: STREAM.INFO, MSG.GET, the probe. */
final class StreamApi {
  static final int ERR_TOO_LARGE = 10054;
  static final int ERR_NOT_FOUND = 10059;
  private static final byte[] NOTHING = new byte[0];

  /** A stream's first and last sequences. */
  record Info(long firstSeq, long lastSeq) {}

  static Info info(NatsClient c, ReadOptions o) {
    JsonNode r = c.api("$JS.API.STREAM.INFO." + o.stream, NOTHING);
    JsonNode err = r.get("error");
    if (err != null) {
      if (err.path("err_code").asInt() == ERR_NOT_FOUND || err.path("code").asInt() == 404) {
        throw new LeafjetException.StreamNotFound(o.where() + " not found: " + description(err));
      }
      throw new LeafjetException("STREAM.INFO failed for " + o.where() + ": " + description(err));
    }
    JsonNode state = r.path("state");
    return new Info(state.path("first_seq").asLong(0), state.path("last_seq").asLong(0));
  }

  /** The first message at or after ``seq`` matching the subject filter, as a one-row frame; null: none. */
  static Frame msgGetNext(NatsClient c, ReadOptions o, long seq) {
    String body =
        "{\"seq\":" + seq + ",\"next_by_subj\":" + quote(o.subject == null ? ">" : o.subject) + "}";
    JsonNode r = c.api("$JS.API.STREAM.MSG.GET." + o.stream, body.getBytes(StandardCharsets.UTF_8));
    JsonNode err = r.get("error");
    if (err != null) {
      int code = err.path("err_code").asInt();
      if (code == 10037 || (err.path("code").asInt() == 404 && code != ERR_NOT_FOUND)) {
        return null;
      }
      if (code == ERR_NOT_FOUND) {
        throw new LeafjetException.StreamNotFound(o.where() + " not found: " + description(err));
      }
      throw new LeafjetException("STREAM.MSG.GET failed for " + o.where() + ": " + description(err));
    }
    try {
      JsonNode m = r.get("message");
      Instant t = Instant.parse(m.get("time").asText());
      byte[] hdrs = m.hasNonNull("hdrs") ? Base64.getDecoder().decode(m.get("hdrs").asText()) : NOTHING;
      byte[] data = m.hasNonNull("data") ? Base64.getDecoder().decode(m.get("data").asText()) : NOTHING;
      return Frame.single(
          m.get("seq").asLong(),
          t.getEpochSecond() * 1_000_000_000L + t.getNano(),
          m.get("subject").asText().getBytes(StandardCharsets.UTF_8),
          hdrs,
          data);
    } catch (RuntimeException e) {
      throw new LeafjetException(
          "unreadable STREAM.MSG.GET answer for " + o.where() + ": " + NatsClient.describe(e), e);
    }
  }

  /**
   * Does the server answer the bulk read API for this stream? Only a server whose INFO names
   * leafjet is asked (the reference leaves the request unanswered: a timeout per query). A frame,
   * or "too large" (the API is there), means yes.
   */
  static boolean probe(NatsClient c, ReadOptions o) {
    if (!c.saysLeafjet()) {
      return false;
    }
    byte[] body = "{\"v\":1,\"seq\":1,\"max_msgs\":1,\"max_bytes\":1024}".getBytes(StandardCharsets.UTF_8);
    NatsClient.Msg m = c.await(c.request(BulkReader.subject(o), body));
    if (m == null || "503".equals(m.status())) {
      return false;
    }
    if (m.header(BulkReader.H_READ) != null) {
      return true;
    }
    JsonNode err = error(m.data);
    return err != null && err.path("err_code").asInt() == ERR_TOO_LARGE;
  }

  /** The API error of a JSON answer (null when it is none). */
  static JsonNode error(byte[] data) {
    try {
      JsonNode n = NatsClient.JSON.readTree(data);
      return n != null && n.has("error") ? n.get("error") : null;
    } catch (java.io.IOException e) {
      return null;
    }
  }

  static String description(JsonNode err) {
    return err.has("description") ? err.get("description").asText() : err.toString();
  }

  static String quote(String s) {
    try {
      return NatsClient.JSON.writeValueAsString(s);
    } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }

  /**
   * The first sequence to read: ``first``, or the stream's first when messages before it are gone
   * (purged, limits, aged out): an error unless failOnDataLoss=false.
   */
  static long checkDataLoss(ReadOptions o, long first, long last, long streamFirst) {
    if (first >= streamFirst || last < first) {
      return first;
    }
    if (o.failOnDataLoss) {
      long goneTo = Math.min(last, streamFirst - 1);
      throw new LeafjetException.DataLoss(
          "data loss on "
              + o.where()
              + ": sequences "
              + first
              + ".."
              + goneTo
              + " were removed (purged, deleted by limits or aged out) before they were read;"
              + " the stream now starts at "
              + streamFirst
              + ". Set option failOnDataLoss=false to skip them.");
    }
    return streamFirst;
  }

  private StreamApi() {}
}
