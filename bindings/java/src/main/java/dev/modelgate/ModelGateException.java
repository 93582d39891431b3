package dev.modelgate;

import java.io.IOException;
import java.nio.charset.StandardCharsets;

/**
 * ModelGateException is a failure the C API reported: a model that did not verify, a file it
 * could not read or parse, a key that does not parse. It carries the C API's stable finding id
 * (e.g. {@code MG-SIG-TENSOR-MISMATCH}), the byte offset in the file it is about, that file and
 * the message; {@link #getMessage()} is the message alone, as in modelgate.h's {@code mg_error}.
 *
 * <p>It is an {@link IOException}: code that loads a model already handles those, and a model
 * that failed verification must not be used, so it cannot be ignored by accident.
 */
public final class ModelGateException extends IOException {
  private static final long serialVersionUID = 1L;

  /** Status is modelgate.h's {@code mg_status} category of the failure. */
  public enum Status {
    /** A NULL or invalid argument, an index out of range, no such tensor. */
    ARGUMENT(1),
    /** Cannot open or read; not a regular file; a symlink; changed while read. */
    IO(2),
    /** Not a file the strict parser accepts (safetensors, index, bundle). */
    FORMAT(3),
    /** Unsigned, untrusted, bad signature, bytes differ from what was signed, not covered. */
    VERIFY(4),
    /** A public key that does not parse, or no key at all. */
    KEY(5),
    /** A request this build of the library does not offer. */
    UNSUPPORTED(6),
    /** Out of memory, or a bug in the library; also any status this binding does not know. */
    INTERNAL(7);

    private final int code;

    Status(int code) {
      this.code = code;
    }

    /** code is the C enum's value. */
    public int code() {
      return code;
    }

    static Status of(int code) {
      for (Status s : values()) {
        if (s.code == code) {
          return s;
        }
      }
      return INTERNAL;
    }
  }

  private final Status status;
  private final String findingId;
  private final long offset;
  private final String file;

  /** Called by the JNI glue with the fields of an {@code mg_error} (UTF-8 bytes). */
  ModelGateException(int status, byte[] findingId, long offset, byte[] file, byte[] message) {
    super(new String(message, StandardCharsets.UTF_8));
    this.status = Status.of(status);
    this.findingId = new String(findingId, StandardCharsets.UTF_8);
    this.offset = offset;
    this.file = new String(file, StandardCharsets.UTF_8);
  }

  /** status is the category of the failure. */
  public Status status() {
    return status;
  }

  /** findingId is the stable id, e.g. "MG-SIG-UNTRUSTED"; "" when the library gave none. */
  public String findingId() {
    return findingId;
  }

  /**
   * offset is the byte offset in {@link #file()} the failure is about, or -1 when it is not about
   * one byte (the C API's MG_NO_OFFSET, UINT64_MAX, read as a signed long).
   */
  public long offset() {
    return offset;
  }

  /** file is the path the failure is about; "" when none. */
  public String file() {
    return file;
  }

  /** toString names the finding id, so a logged stack trace says which check failed. */
  @Override
  public String toString() {
    String id = findingId.isEmpty() ? status.name().toLowerCase(java.util.Locale.ROOT) : findingId;
    return getClass().getName() + ": " + id + ": " + getMessage();
  }
}
