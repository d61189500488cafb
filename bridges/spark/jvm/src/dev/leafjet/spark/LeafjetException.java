package dev.leafjet.spark;

/**
 * Any failure of the JVM reader; the message names the server(s) and the stream, with the same
 * texts as the Python source's errors (bridges/spark/reader.py), so Spark's wrapped error reads alike.
 */
class LeafjetException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  LeafjetException(String message) {
    super(message);
  }

  LeafjetException(String message, Throwable cause) {
    super(message, cause);
  }

  static final class ServerUnreachable extends LeafjetException {
    private static final long serialVersionUID = 1L;

    ServerUnreachable(String message, Throwable cause) {
      super(message, cause);
    }
  }

  /** The server's INFO requires TLS, which this client does not speak. */
  static final class TlsRequired extends LeafjetException {
    private static final long serialVersionUID = 1L;

    TlsRequired(String message) {
      super(message);
    }
  }

  static final class Authentication extends LeafjetException {
    private static final long serialVersionUID = 1L;

    Authentication(String message) {
      super(message);
    }
  }

  static final class StreamNotFound extends LeafjetException {
    private static final long serialVersionUID = 1L;

    StreamNotFound(String message) {
      super(message);
    }
  }

  static final class DataLoss extends LeafjetException {
    private static final long serialVersionUID = 1L;

    DataLoss(String message) {
      super(message);
    }
  }
}
