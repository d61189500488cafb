package dev.leafjet.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.Closeable;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.UUID;

/**
 * A minimal NATS client over one plain socket: CONNECT (user/password or token), one wildcard
 * inbox subscription, PUB with a reply subject, MSG/HMSG, PING/PONG. Synchronous: the caller
 * reads until the reply it waits for arrives; replies to other requests are kept by token. Every
 * read has the source's timeout (a read that gets any byte is progress), and the handshake as a
 * whole has it too (a server that trickles its INFO a byte at a time is not progress); no
 * reconnects: a task that loses its server fails and Spark retries it. Each request says how
 * large its reply may be: a message line that claims more ends the read before anything is
 * allocated.
 */
final class NatsClient implements Closeable {
  static final ObjectMapper JSON = new ObjectMapper();
  /** Room for what wraps a payload: a JSON answer's fields, a frame's header and padding. */
  static final int FRAMING = 64 << 10;
  /** NATS caps max_payload at 64 MiB; an INFO that says more is not believed. */
  private static final int MAX_PAYLOAD_CEILING = 64 << 20;

  /**
   * One received message: the token of its inbox subject, its header block (or null), payload:
   * the first ``length`` bytes of ``data`` (the whole array unless its request reuses buffers).
   */
  static final class Msg {
    final String token;
    final byte[] headers;
    final byte[] data;
    final int length;

    Msg(String token, byte[] headers, byte[] data) {
      this(token, headers, data, data == null ? 0 : data.length);
    }

    Msg(String token, byte[] headers, byte[] data, int length) {
      this.token = token;
      this.headers = headers;
      this.data = data;
      this.length = length;
    }

    /** The payload in an array of its own length. */
    byte[] exact() {
      return length == data.length ? data : java.util.Arrays.copyOf(data, length);
    }

    /** A header's value ("Name: value" lines of the block), or null. */
    String header(String name) {
      if (headers == null) {
        return null;
      }
      String block = new String(headers, StandardCharsets.UTF_8);
      for (String line : block.split("\r\n")) {
        int colon = line.indexOf(':');
        if (colon > 0 && line.substring(0, colon).strip().equalsIgnoreCase(name)) {
          return line.substring(colon + 1).strip();
        }
      }
      return null;
    }

    /** The status code of a status message ("NATS/1.0 503"), or null. */
    String status() {
      if (headers == null) {
        return null;
      }
      int end = 0;
      while (end < headers.length && headers[end] != '\r') {
        end++;
      }
      String first = new String(headers, 0, end, StandardCharsets.US_ASCII).strip();
      String[] parts = first.split(" ");
      return parts.length > 1 ? parts[1] : null;
    }
  }

  private final ReadOptions opts;
  private final Socket socket;
  private final InputStream in;
  private final OutputStream out;
  private final byte[] buf = new byte[64 * 1024];
  private int pos;
  private int lim;
  private final String inbox;
  private long counter;
  private final Map<String, Msg> early = new HashMap<>(); // replies that came before their await
  // requests whose reply is still wanted, with the most bytes that reply may have: only their
  // replies are kept, so a server's replies to nothing (or twice, or to a forgotten request)
  // cannot pile up
  private final Map<String, Integer> pending = new HashMap<>();
  private int largestAsked = FRAMING; // the largest reply any request so far may have had
  // requests whose reply payload goes into a reused buffer (bulk frames: ~1 MiB each, a humongous
  // allocation for G1 when new every time), and the buffers handed back (recycle)
  private final java.util.Set<String> reusing = new java.util.HashSet<>();
  private final java.util.ArrayDeque<byte[]> spare = new java.util.ArrayDeque<>();
  private static final int SPARE_BUFFERS = 2;
  private static final int BUFFER_STEP = 256 << 10;
  private long handshakeDeadline; // System.nanoTime() the handshake must end by; 0 once it has
  final JsonNode serverInfo;
  /** The largest message the server accepts (its INFO's max_payload; 1 MiB when it names none). */
  final int maxPayload;

  private NatsClient(ReadOptions opts, Socket socket) throws IOException {
    this.opts = opts;
    this.socket = socket;
    this.in = socket.getInputStream();
    this.out = new java.io.BufferedOutputStream(socket.getOutputStream(), 8192);
    this.inbox = "_INBOX." + UUID.randomUUID().toString().replace("-", "");
    this.handshakeDeadline = System.nanoTime() + opts.timeoutMillis() * 1_000_000L;
    String info = readLine();
    if (!info.startsWith("INFO ")) {
      throw new IOException("expected INFO, got '" + abbreviate(info) + "'");
    }
    serverInfo = JSON.readTree(info.substring(5));
    long said = serverInfo.path("max_payload").asLong(1 << 20);
    maxPayload = (int) Math.max(1024, Math.min(said, MAX_PAYLOAD_CEILING));
  }

  /**
   * The most bytes a JetStream API answer may have: a message of up to max_payload in base64 (as
   * STREAM.MSG.GET answers it) with its JSON fields.
   */
  int apiReplyLimit() {
    return maxPayload / 3 * 4 + FRAMING;
  }

  /** Connect to the first server of the list that answers; errors name the server and the stream. */
  static NatsClient connect(ReadOptions opts) {
    Exception last = null;
    String where = "leafjet server " + opts.display() + " (stream '" + opts.stream + "')";
    for (String url : opts.servers) {
      URI uri = ReadOptions.uri(url);
      int port = uri.getPort() < 0 ? 4222 : uri.getPort();
      Socket s = new Socket();
      NatsClient c = null;
      try {
        s.setTcpNoDelay(true);
        s.setReceiveBufferSize(4 << 20);
        s.connect(new InetSocketAddress(uri.getHost(), port), opts.timeoutMillis());
        s.setSoTimeout(opts.timeoutMillis());
        c = new NatsClient(opts, s);
      } catch (IOException | RuntimeException e) {
        closeQuietly(s);
        last = e;
        continue;
      }
      c.handshake(where);
      c.handshakeDeadline = 0;
      try {
        s.setSoTimeout(opts.timeoutMillis());
      } catch (IOException e) {
        c.close();
        throw new LeafjetException.ServerUnreachable("cannot reach " + where + ": " + describe(e), e);
      }
      return c;
    }
    throw new LeafjetException.ServerUnreachable(
        "cannot reach " + where + ": " + (last == null ? "no server" : describe(last)), last);
  }

  private void handshake(String where) {
    if (serverInfo.path("tls_required").asBoolean(false)) {
      close();
      throw new LeafjetException.TlsRequired(
          "cannot reach "
              + where
              + ": the server requires TLS, which the JVM reader does not speak"
              + " (option reader=python, or a tls:// URL, reads it with the Python source)");
    }
    ObjectNode connect = JSON.createObjectNode();
    connect.put("verbose", false).put("pedantic", false).put("tls_required", false);
    connect.put("name", "leafjet-spark-jvm").put("lang", "java").put("version", "1");
    connect.put("protocol", 1).put("headers", true).put("no_responders", true);
    if (opts.user != null) {
      connect.put("user", opts.user).put("pass", opts.password == null ? "" : opts.password);
    }
    if (opts.token != null) {
      connect.put("auth_token", opts.token);
    }
    try {
      write(("CONNECT " + JSON.writeValueAsString(connect) + "\r\nPING\r\n").getBytes(StandardCharsets.UTF_8));
      write(("SUB " + inbox + ".* 1\r\n").getBytes(StandardCharsets.US_ASCII));
      flush();
      while (true) {
        String line = readLine();
        if (line.startsWith("PONG")) {
          return;
        }
        if (line.startsWith("-ERR")) {
          String text = line.substring(4).strip();
          String lower = text.toLowerCase(java.util.Locale.ROOT);
          close();
          if (lower.contains("authoriz") || lower.contains("authentic")) {
            String who =
                opts.user != null
                    ? "user '" + opts.user + "'"
                    : (opts.token != null ? "a token" : "no credentials");
            throw new LeafjetException.Authentication(
                "authentication failed at " + where + " with " + who + ": " + text);
          }
          throw new LeafjetException.ServerUnreachable("cannot reach " + where + ": " + text, null);
        }
        // +OK, INFO, PING before the PONG: nothing to do (a PING is answered by readLine's caller)
        if (line.startsWith("PING")) {
          write("PONG\r\n".getBytes(StandardCharsets.US_ASCII));
          flush();
        }
      }
    } catch (IOException e) {
      close();
      throw new LeafjetException.ServerUnreachable("cannot reach " + where + ": " + describe(e), e);
    }
  }

  /** Whether the server's INFO names leafjet (its "go" field: "python3.x leafjet/<version>"). */
  boolean saysLeafjet() {
    JsonNode go = serverInfo.get("go");
    return go != null && go.asText().contains("leafjet/");
  }

  /** Send a JetStream API request; returns its token (the reply comes to inbox.token). */
  String request(String subject, byte[] body) {
    return request(subject, body, apiReplyLimit());
  }

  /**
   * Send a request whose reply may have at most ``replyLimit`` bytes (headers and payload);
   * returns its token (the reply comes to inbox.token).
   */
  String request(String subject, byte[] body, int replyLimit) {
    return request(subject, body, replyLimit, false);
  }

  /**
   * As {@link #request(String, byte[], int)}; with ``reuse`` the reply's payload is read into a
   * buffer handed back earlier by {@link #recycle} when one is large enough (its {@link Msg#length}
   * then says where the payload ends).
   */
  String request(String subject, byte[] body, int replyLimit, boolean reuse) {
    String token = Long.toString(++counter);
    pending.put(token, replyLimit);
    largestAsked = Math.max(largestAsked, replyLimit);
    if (reuse) {
      reusing.add(token);
    }
    try {
      write(
          ("PUB " + subject + " " + inbox + "." + token + " " + body.length + "\r\n")
              .getBytes(StandardCharsets.UTF_8));
      write(body);
      write(CRLF);
      flush();
    } catch (IOException e) {
      throw new LeafjetException("lost the connection to " + opts.where() + ": " + describe(e), e);
    }
    return token;
  }

  /** The reply to ``token``; null when none came within the timeout (a read without progress). */
  Msg await(String token) {
    Msg m = early.remove(token);
    if (m != null) {
      pending.remove(token);
      reusing.remove(token);
      return m;
    }
    try {
      while (true) {
        m = readMsg();
        if (m.token.equals(token)) {
          pending.remove(token);
          reusing.remove(token);
          return m;
        }
        if (m.data != null && pending.containsKey(m.token)) {
          early.put(m.token, m);
        }
      }
    } catch (SocketTimeoutException e) {
      return null;
    } catch (MessageTooLarge e) {
      throw new LeafjetException("bad reply from " + opts.where() + ": " + e.getMessage(), e);
    } catch (IOException e) {
      throw new LeafjetException("lost the connection to " + opts.where() + ": " + describe(e), e);
    }
  }

  /** Forget a request whose reply will not be used (a reply that comes later is dropped). */
  void forget(String token) {
    pending.remove(token);
    reusing.remove(token);
    early.remove(token);
  }

  /** A payload buffer of a reusing request that nothing reads any more: the next such reply's. */
  void recycle(byte[] b) {
    if (b != null && spare.size() < SPARE_BUFFERS) {
      spare.push(b);
    }
  }

  private byte[] buffer(int n) {
    while (!spare.isEmpty()) {
      byte[] b = spare.pop();
      if (b.length >= n) {
        return b;
      }
    }
    // rounded up, so a later reply a little larger than this one still fits it
    return new byte[(int) Math.min(Integer.MAX_VALUE - 8, ((long) n + BUFFER_STEP - 1) / BUFFER_STEP * BUFFER_STEP)];
  }

  /** A JetStream API request's JSON answer; errors name the subject and the stream. */
  JsonNode api(String subject, byte[] body) {
    Msg m = await(request(subject, body));
    if (m == null) {
      throw new LeafjetException(
          subject + " timed out after " + opts.timeoutSeconds + "s for " + opts.where());
    }
    if ("503".equals(m.status())) {
      throw new LeafjetException(
          "no JetStream API answered "
              + subject
              + " for "
              + opts.where()
              + " (is JetStream enabled for this account?)");
    }
    try {
      JsonNode n = JSON.readTree(m.data);
      if (n != null && n.isObject() && (n.get("error") == null || n.get("error").isObject())) {
        return n;
      }
    } catch (IOException e) {
      // below: the same error as for JSON that is not an object
    }
    String start = new String(m.data, 0, Math.min(80, m.data.length), StandardCharsets.UTF_8);
    throw new LeafjetException("unreadable answer to " + subject + " for " + opts.where() + ": " + start);
  }

  private Msg readMsg() throws IOException {
    while (true) {
      String line = readLine();
      if (line.startsWith("MSG ") || line.startsWith("HMSG ")) {
        boolean hasHeaders = line.charAt(0) == 'H';
        String[] f = line.split(" ");
        // MSG subject sid [reply] size / HMSG subject sid [reply] hdr_size total_size
        int total;
        int hdr;
        try {
          total = Integer.parseInt(f[f.length - 1]);
          hdr = hasHeaders ? Integer.parseInt(f[f.length - 2]) : 0;
        } catch (RuntimeException e) {
          throw new IOException("bad message line '" + abbreviate(line) + "'");
        }
        if (total < hdr || hdr < 0 || f.length < 4) {
          throw new IOException("bad message sizes in '" + abbreviate(line) + "'");
        }
        String subject = f[1];
        String token = subject.substring(subject.lastIndexOf('.') + 1);
        Integer limit = pending.get(token);
        if (limit == null) { // a reply to nothing still awaited (a forgotten request): skipped, never kept
          if (total > largestAsked) {
            throw new MessageTooLarge(
                "a message of " + total + " bytes to nothing awaited, more than any request asked for");
          }
          skipBytes(total + 2L);
          return new Msg(token, null, null);
        }
        // checked before anything is allocated: a forged size cannot take the heap
        if (total > limit) {
          throw new MessageTooLarge(
              "a reply of " + total + " bytes, more than the " + limit + " asked for (with framing)");
        }
        byte[] headers = hasHeaders ? readBytes(hdr) : null;
        int size = total - hdr;
        byte[] data = reusing.contains(token) ? readInto(buffer(size), size) : readBytes(size);
        readBytes(2); // CRLF
        return new Msg(token, headers, data, size);
      } else if (line.startsWith("PING")) {
        write("PONG\r\n".getBytes(StandardCharsets.US_ASCII));
        flush();
      } else if (line.startsWith("-ERR")) {
        throw new IOException("server error " + line.substring(4).strip());
      }
      // +OK, PONG, INFO: nothing to do
    }
  }

  /** One protocol line without its CRLF; a line longer than the buffer is gathered as bytes, so a
   * UTF-8 character split between two reads is decoded whole. */
  private String readLine() throws IOException {
    java.io.ByteArrayOutputStream longer = null;
    while (true) {
      for (int i = pos; i < lim; i++) {
        if (buf[i] == '\n') {
          int start = pos;
          pos = i + 1;
          if (longer == null) {
            int end = i > start && buf[i - 1] == '\r' ? i - 1 : i;
            return new String(buf, start, end - start, StandardCharsets.UTF_8);
          }
          longer.write(buf, start, i - start);
          byte[] line = longer.toByteArray();
          int n = line.length > 0 && line[line.length - 1] == '\r' ? line.length - 1 : line.length;
          return new String(line, 0, n, StandardCharsets.UTF_8);
        }
      }
      if (longer == null) {
        longer = new java.io.ByteArrayOutputStream();
      }
      longer.write(buf, pos, lim - pos);
      if (longer.size() > 1 << 20) {
        throw new IOException("protocol line too long");
      }
      pos = lim;
      fill();
    }
  }

  /** A reply larger than its request allows (a broken or forged server). */
  static final class MessageTooLarge extends IOException {
    private static final long serialVersionUID = 1L;

    MessageTooLarge(String message) {
      super(message);
    }
  }

  private void skipBytes(long n) throws IOException {
    while (n > 0) {
      if (pos == lim) {
        fill();
      }
      int take = (int) Math.min(n, lim - pos);
      pos += take;
      n -= take;
    }
  }

  private byte[] readBytes(int n) throws IOException {
    return readInto(new byte[n], n);
  }

  /** The next ``n`` bytes into the start of ``outBytes``; returns it. */
  private byte[] readInto(byte[] outBytes, int n) throws IOException {
    int have = Math.min(n, lim - pos);
    System.arraycopy(buf, pos, outBytes, 0, have);
    pos += have;
    while (have < n) {
      int r = in.read(outBytes, have, n - have);
      if (r < 0) {
        throw new IOException("connection closed by the server");
      }
      have += r;
    }
    return outBytes;
  }

  private void fill() throws IOException {
    pos = 0;
    lim = 0;
    if (handshakeDeadline != 0) { // each read gets what is left of the handshake's time
      long left = (handshakeDeadline - System.nanoTime()) / 1_000_000L;
      if (left <= 0) {
        throw new SocketTimeoutException(
            "no handshake (INFO, CONNECT, PONG) within " + opts.timeoutSeconds + "s");
      }
      socket.setSoTimeout((int) Math.min(left, Integer.MAX_VALUE));
    }
    int r;
    try {
      r = in.read(buf, 0, buf.length);
    } catch (SocketTimeoutException e) {
      if (handshakeDeadline != 0) {
        throw new SocketTimeoutException(
            "no handshake (INFO, CONNECT, PONG) within " + opts.timeoutSeconds + "s");
      }
      throw e;
    }
    if (r < 0) {
      throw new IOException("connection closed by the server");
    }
    lim = r;
  }

  private static final byte[] CRLF = {'\r', '\n'};

  private void write(byte[] b) throws IOException {
    out.write(b);
  }

  private void flush() throws IOException {
    out.flush();
  }

  static String describe(Throwable e) {
    String text = e.getMessage();
    return e.getClass().getSimpleName() + (text == null || text.isBlank() ? "" : ": " + text);
  }

  private static String abbreviate(String s) {
    return s.length() > 80 ? s.substring(0, 80) + "..." : s;
  }

  private static void closeQuietly(Socket s) {
    try {
      s.close();
    } catch (IOException e) {
      // being discarded
    }
  }

  @Override
  public void close() {
    closeQuietly(socket);
  }
}
