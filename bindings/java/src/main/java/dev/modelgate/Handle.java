package dev.modelgate;

/**
 * Handle owns one {@code mg_model*} and counts who needs it: the open {@link VerifiedModel}
 * (one reference, dropped by close()), each native call in flight (so a close() on another thread
 * cannot free the model under it), and each tensor buffer handed out (dropped by a Cleaner when
 * the buffer becomes unreachable). The model is freed when the count reaches zero, and only then.
 */
final class Handle {
  private long model;
  private long references = 1;
  private boolean closed;

  Handle(long model) {
    this.model = model;
  }

  /**
   * acquire takes a reference for one call and returns the model; throws IllegalStateException
   * once the VerifiedModel was closed. Pair with {@link #release()} in a finally block.
   */
  synchronized long acquire() {
    if (closed) {
      throw new IllegalStateException("modelgate: the VerifiedModel is closed");
    }
    references++;
    return model;
  }

  /** retain takes one more reference for a buffer; the caller already holds one. */
  synchronized void retain() {
    references++;
  }

  /** release drops a reference and frees the model when it was the last. */
  synchronized void release() {
    if (--references == 0) {
      Native.free(model);
      model = 0;
    }
  }

  /** close drops the VerifiedModel's own reference, once; later acquire() calls throw. */
  synchronized void close() {
    if (!closed) {
      closed = true;
      release();
    }
  }

  synchronized boolean isClosed() {
    return closed;
  }

  synchronized boolean isReleased() {
    return model == 0;
  }
}
