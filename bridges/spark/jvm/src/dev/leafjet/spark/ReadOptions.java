package dev.leafjet.spark;

import java.io.Serializable;
import java.net.InetAddress;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The source's options, validated as bridges/spark/options.py validates them (same names, same
 * messages), plus {@link #pythonOnly()}: what only the Python source can do. Serializable: it
 * travels in every partition to the executors.
 */
final class ReadOptions implements Serializable {
  private static final long serialVersionUID = 1L;
  static final int MAX_MSGS = 100_000; // the server clamps a bulk read's max_msgs to this

  final List<String> servers;
  final String stream;
  final String user;
  final String password;
  final String token;
  final String subject;
  final Long startSeq;
  final Long endSeq;
  final boolean failOnDataLoss;
  final int numPartitions;
  final int minPartitionSize;
  final int rowsPerRequest;
  final double timeoutSeconds;
  final boolean nullHeaders;
  final String compression;
  final String bulkRead;
  final String reader;
  /** zstd frames: asked for, or (auto) a server is not on this machine; decided once, not per request. */
  final boolean wantsZstd;
  private final String pythonReason;

  private ReadOptions(Map<String, String> raw) {
    Map<String, String> o = new java.util.HashMap<>();
    for (Map.Entry<String, String> e : raw.entrySet()) {
      o.put(e.getKey().toLowerCase(Locale.ROOT), e.getValue());
    }
    List<String> urls = new ArrayList<>();
    for (String s : o.getOrDefault("servers", "").split(",")) {
      if (!s.strip().isEmpty()) {
        urls.add(s.strip());
      }
    }
    if (urls.isEmpty()) {
      throw new IllegalArgumentException("option 'servers' is required, e.g. nats://127.0.0.1:4222");
    }
    for (String url : urls) {
      try {
        uri(url);
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException("option 'servers' has a malformed URL '" + url + "'", e);
      }
    }
    servers = List.copyOf(urls);
    stream = o.getOrDefault("stream", "").strip();
    if (stream.isEmpty() || stream.chars().anyMatch(c -> " .*>\t".indexOf(c) >= 0)) {
      throw new IllegalArgumentException(
          "option 'stream' must name a stream (no spaces, '.', '*' or '>'), got '" + stream + "'");
    }
    user = blankToNull(o.get("user"));
    password = blankToNull(o.get("password"));
    token = blankToNull(o.get("token"));
    subject = blankToNull(o.get("subject"));
    startSeq = longOption(o, "startseq", "startSeq", 1);
    endSeq = longOption(o, "endseq", "endSeq", 1);
    if (startSeq != null && blankToNull(o.get("starttime")) != null) {
      throw new IllegalArgumentException("options 'startSeq' and 'startTime' are exclusive; give one");
    }
    if (endSeq != null && blankToNull(o.get("endtime")) != null) {
      throw new IllegalArgumentException("options 'endSeq' and 'endTime' are exclusive; give one");
    }
    failOnDataLoss = boolOption(o, "failondataloss", "failOnDataLoss", true);
    nullHeaders = boolOption(o, "nullheaders", "nullHeaders", false);
    Long parts = longOption(o, "numpartitions", "numPartitions", 1);
    numPartitions =
        parts == null ? Math.max(1, Runtime.getRuntime().availableProcessors()) : clampInt(parts);
    Long minSize = longOption(o, "minpartitionsize", "minPartitionSize", 1);
    minPartitionSize = minSize == null ? 1000 : clampInt(minSize);
    Long perBatch = longOption(o, "rowsperarrowbatch", "rowsPerArrowBatch", 1);
    rowsPerRequest = (int) Math.min(perBatch == null ? 8192 : perBatch, MAX_MSGS);
    // validated as the Python source does, though only the direct-get path uses them
    longOption(o, "batchsize", "batchSize", 1);
    longOption(o, "inflight", "inFlight", 1);
    longOption(o, "maxrecordsperbatch", "maxRecordsPerBatch", 1);
    String t = o.getOrDefault("timeout", "5").strip();
    try {
      timeoutSeconds = Double.parseDouble(t);
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("option 'timeout' must be seconds, got '" + t + "'");
    }
    if (!Double.isFinite(timeoutSeconds) || timeoutSeconds <= 0) { // was a silent 1 ms timeout
      throw new IllegalArgumentException("option 'timeout' must be seconds > 0, got '" + t + "'");
    }
    compression = choice(o, "compression", "auto", "zstd", "none");
    bulkRead = choice(o, "bulkRead", "auto", "true", "false");
    reader = choice(o, "reader", "auto", "jvm", "python");
    choice(o, "useDirect", "auto", "true", "false");
    wantsZstd = "auto".equals(compression) ? !allLoopback() : "zstd".equals(compression);
    pythonReason = pythonOnlyReason(o);
    if ("jvm".equals(reader) && pythonReason != null) {
      throw new IllegalArgumentException(
          "option reader=jvm, but the JVM reader does not support " + pythonReason);
    }
  }

  static ReadOptions parse(Map<String, String> raw) {
    return new ReadOptions(raw);
  }

  /** Why this read needs the Python source (null: the JVM reader can do it). */
  String pythonOnly() {
    return pythonReason;
  }

  private String pythonOnlyReason(Map<String, String> o) {
    if ("python".equals(reader)) {
      return "option reader=python";
    }
    if (blankToNull(o.get("starttime")) != null || blankToNull(o.get("endtime")) != null) {
      return "options 'startTime'/'endTime' (time search)";
    }
    for (String k : new String[] {"tlscafile", "cafile", "tlscertfile", "tlskeyfile"}) {
      if (blankToNull(o.get(k)) != null) {
        return "TLS";
      }
    }
    for (String s : servers) {
      if (s.toLowerCase(Locale.ROOT).startsWith("tls://")) {
        return "TLS";
      }
    }
    if ("false".equals(bulkRead)) {
      return "bulkRead=false (direct gets)";
    }
    return null;
  }

  int timeoutMillis() {
    return (int) Math.max(1, Math.min(Integer.MAX_VALUE, Math.round(timeoutSeconds * 1000)));
  }

  String display() {
    return String.join(",", servers);
  }

  String where() {
    return "stream '" + stream + "' on " + display();
  }

  /** A server URL of the option, ``nats://`` when it names no scheme. */
  static URI uri(String url) {
    return URI.create(url.contains("://") ? url : "nats://" + url);
  }

  private boolean allLoopback() {
    for (String url : servers) {
      String host = uri(url).getHost();
      if (host == null) {
        return false;
      }
      if (host.equals("localhost")) {
        continue;
      }
      boolean literal = host.matches("[0-9.]+") || host.startsWith("[") || host.contains(":");
      if (!literal) {
        return false;
      }
      try {
        if (!InetAddress.getByName(host).isLoopbackAddress()) {
          return false;
        }
      } catch (java.net.UnknownHostException e) {
        return false;
      }
    }
    return true;
  }

  private static int clampInt(long v) {
    return (int) Math.min(v, Integer.MAX_VALUE);
  }

  private static String blankToNull(String s) {
    return s == null || s.strip().isEmpty() ? null : s.strip();
  }

  private static Long longOption(Map<String, String> o, String key, String name, long minimum) {
    String raw = blankToNull(o.get(key));
    if (raw == null) {
      return null;
    }
    long v;
    try {
      v = Long.parseLong(raw);
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(
          "option '" + name + "' must be an integer, got '" + o.get(key) + "'");
    }
    if (v < minimum) {
      throw new IllegalArgumentException(
          "option '" + name + "' must be >= " + minimum + ", got " + v);
    }
    return v;
  }

  private static boolean boolOption(Map<String, String> o, String key, String name, boolean dflt) {
    String raw = o.get(key);
    if (raw == null) {
      return dflt;
    }
    String t = raw.strip().toLowerCase(Locale.ROOT);
    if (t.equals("true") || t.equals("1") || t.equals("yes")) {
      return true;
    }
    if (t.equals("false") || t.equals("0") || t.equals("no")) {
      return false;
    }
    throw new IllegalArgumentException("option '" + name + "' must be true or false, got '" + raw + "'");
  }

  private static String choice(Map<String, String> o, String name, String... allowed) {
    String v = o.getOrDefault(name.toLowerCase(Locale.ROOT), allowed[0]).strip().toLowerCase(Locale.ROOT);
    for (String a : allowed) {
      if (a.equals(v)) {
        return v;
      }
    }
    throw new IllegalArgumentException(
        "option '" + name + "' must be one of " + String.join(", ", allowed) + ", got '" + v + "'");
  }
}
