package dev.modelgate;

import java.lang.ref.Cleaner;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * VerifiedModel is a model that passed verification: its tensors' bytes, as read-only
 * little-endian direct {@link ByteBuffer}s over the verified memory (no copy), their dtype and
 * shape, and the files' signed metadata.
 *
 * <p><b>Buffer lifetime.</b> A direct buffer over native memory is a bare address: if the
 * mapping were unmapped while a buffer (or any view derived from it: {@code slice()}, {@code
 * duplicate()}, {@code asFloatBuffer()}) is still reachable, reading it would read freed memory
 * or crash the JVM, and Java offers no way to revoke a buffer. So {@link #close()} does not free
 * the native model while a buffer it handed out is reachable: close() ends this object (every
 * accessor, and {@link Tensor#data()}, throw IllegalStateException afterwards) and drops its own
 * reference; each buffer holds another, dropped by a {@link Cleaner} once the buffer and every
 * view of it are unreachable; the mapping and file descriptors go with the last reference ({@link
 * #isReleased()}). Buffers obtained before close() thus stay valid, and read the verified bytes,
 * for as long as they are used. Why not the alternatives: refusing close() while buffers are
 * reachable depends on when the GC runs, so close() would fail at random; copying every tensor
 * (or copy mode by default) defeats zero-copy loading of large models; invalidating buffers is
 * impossible. The price is that the mapping outlives close() until the GC collects the buffers:
 * to release a model promptly, drop the buffers (and anything holding them, e.g. a DJL NDArray)
 * before closing. A VerifiedModel that is never closed is released the same way once it and its
 * buffers are unreachable.
 *
 * <p><b>Threads.</b> As the C API's {@code mg_model}: any number of threads may call any method
 * at once (in lazy mode one thread hashes a tensor, the others wait for it); close() may race
 * with them: a call that began before it completes on a model that is still there, and a call
 * after it throws IllegalStateException.
 */
public final class VerifiedModel implements AutoCloseable {
  private static final Cleaner CLEANER = Cleaner.create();

  private final Handle handle;
  private final Cleaner.Cleanable closer;
  private final ModelGate.Mode mode;
  private final List<String> names;

  VerifiedModel(Handle handle, ModelGate.Mode mode) throws ModelGateException {
    this.handle = handle;
    this.mode = mode;
    this.closer = CLEANER.register(this, handle::close);
    List<String> n;
    try {
      n = readNames();
    } catch (RuntimeException | ModelGateException | Error e) {
      closer.clean();
      throw e;
    }
    this.names = n;
  }

  private List<String> readNames() throws ModelGateException {
    long model = handle.acquire();
    try {
      long count = Native.tensorCount(model);
      List<String> out = new ArrayList<>(Math.toIntExact(count));
      for (long i = 0; i < count; i++) {
        out.add(decode((byte[]) Native.tensorInfo(model, i)[0]));
      }
      return Collections.unmodifiableList(out);
    } finally {
      handle.release();
    }
  }

  /** mode is the mode the model was opened in. */
  public ModelGate.Mode mode() {
    checkOpen();
    return mode;
  }

  /** tensorNames lists every tensor across the files, ordered bytewise by UTF-8 name. */
  public List<String> tensorNames() {
    checkOpen();
    return names;
  }

  /**
   * tensor is the tensor named {@code name}, with its bytes. In lazy mode this is where the
   * tensor (or its file, for a detached bundle) is hashed: a mismatch throws here, and again on
   * every later call.
   *
   * @throws ModelGateException status ARGUMENT, id MG-API-NO-TENSOR, when there is no such tensor;
   *     status VERIFY when lazy verification fails.
   * @throws ArithmeticException for a dimension above Long.MAX_VALUE (possible only in a tensor
   *     with no elements), which a long[] shape cannot hold.
   */
  public Tensor tensor(String name) throws ModelGateException {
    byte[] utf8 = ModelGate.encodeStrict(name, StandardCharsets.UTF_8);
    long model = handle.acquire();
    try {
      long index = Native.find(model, utf8);
      Object[] info = Native.tensorInfo(model, index);
      long[] shape = (long[]) info[2];
      long[] sizes = (long[]) info[3];
      long byteLength = sizes[0];
      for (long dim : shape) {
        if (dim < 0) {
          throw new ArithmeticException(
              "tensor \"" + name + "\" has a dimension above Long.MAX_VALUE (unsigned "
                  + Long.toUnsignedString(dim) + ")");
        }
      }
      ByteBuffer base = null;
      if (byteLength <= Integer.MAX_VALUE) {
        base = buffer(model, index, 0, byteLength);
      } else {
        Native.data(model, index, 0, 0);
      }
      return new Tensor(
          this, index, name, decode((byte[]) info[1]), shape, byteLength, (int) sizes[2],
          (int) sizes[1], base);
    } finally {
      handle.release();
    }
  }

  /**
   * buffer wraps bytes [offset, offset+length) of tensor {@code index} in a read-only
   * little-endian view that keeps the native model alive while it (or any view of it) is
   * reachable. The caller holds a reference for the call.
   */
  private ByteBuffer buffer(long model, long index, long offset, long length)
      throws ModelGateException {
    ByteBuffer root = Native.data(model, index, offset, length);
    if (root == null) {
      throw new UnsupportedOperationException("modelgate: this JVM has no direct buffers");
    }
    handle.retain();
    CLEANER.register(root, handle::release);
    // Every view (this read-only one, and what callers derive from it) references root, so root
    // stays reachable until the last view is unreachable. root itself never leaves this method:
    // it is writable as far as Java knows and the memory may be mapped read-only.
    return root.asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN);
  }

  /** slice is Tensor.data(offset, length) for a tensor without a whole-tensor buffer. */
  ByteBuffer slice(long index, long offset, int length) throws ModelGateException {
    long model = handle.acquire();
    try {
      return buffer(model, index, offset, length);
    } finally {
      handle.release();
    }
  }

  /** checkOpen throws IllegalStateException once the model was closed. */
  void checkOpen() {
    if (handle.isClosed()) {
      throw new IllegalStateException("modelgate: the VerifiedModel is closed");
    }
  }

  /**
   * checkAll verifies everything lazy mode has not verified yet (nothing to do for eager and
   * copy), and throws the first failure.
   */
  public void checkAll() throws ModelGateException {
    long model = handle.acquire();
    try {
      Native.checkAll(model);
    } finally {
      handle.release();
    }
  }

  /** fileCount is the number of safetensors files (1 for a file). */
  public int fileCount() {
    long model = handle.acquire();
    try {
      return Math.toIntExact(Native.fileCount(model));
    } finally {
      handle.release();
    }
  }

  /** filePath is file {@code index}'s path, as the model was opened. */
  public Path filePath(int index) {
    long model = handle.acquire();
    try {
      byte[] p = Native.filePath(model, index);
      if (index < 0 || p == null) {
        throw new IndexOutOfBoundsException("file " + index + " of " + Native.fileCount(model));
      }
      return Path.of(new String(p, StandardCharsets.UTF_8));
    } finally {
      handle.release();
    }
  }

  /** metadata is {@link #metadata(int) metadata(0)}: a single file's metadata. */
  public Map<String, String> metadata() throws ModelGateException {
    return metadata(0);
  }

  /**
   * metadata is file {@code fileIndex}'s signed {@code __metadata__}, without the stsig.*
   * signature keys, in bytewise key order; unmodifiable.
   */
  public Map<String, String> metadata(int fileIndex) throws ModelGateException {
    long model = handle.acquire();
    try {
      long files = Native.fileCount(model);
      if (fileIndex < 0 || fileIndex >= files) {
        throw new IndexOutOfBoundsException("file " + fileIndex + " of " + files);
      }
      long count = Native.metadataCount(model, fileIndex);
      Map<String, String> out = new LinkedHashMap<>();
      for (long i = 0; i < count; i++) {
        byte[][] kv = Native.metadataEntry(model, fileIndex, i);
        out.put(decode(kv[0]), decode(kv[1]));
      }
      return Collections.unmodifiableMap(out);
    } finally {
      handle.release();
    }
  }

  /**
   * verificationJson says how the model was verified (kind, mode, keys, files and their digests):
   * modelgate.h's mg_model_verification_json.
   */
  public String verificationJson() {
    long model = handle.acquire();
    try {
      return new String(Native.verificationJson(model), StandardCharsets.UTF_8);
    } finally {
      handle.release();
    }
  }

  /**
   * isReleased is true once the native model (mappings, file descriptors) was freed: after
   * close(), once no buffer it handed out is reachable any more.
   */
  public boolean isReleased() {
    return handle.isReleased();
  }

  /**
   * close ends this object: every accessor throws IllegalStateException afterwards. The native
   * model is freed now, or, while a buffer handed out is reachable, once none is (see the class
   * comment). Idempotent.
   */
  @Override
  public void close() {
    closer.clean();
  }

  /**
   * decode is strict UTF-8: the C API hands out names and metadata as the file's UTF-8, and a
   * lossy decoding could give two names one spelling.
   */
  private static String decode(byte[] utf8) {
    try {
      return StandardCharsets.UTF_8
          .newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(utf8))
          .toString();
    } catch (CharacterCodingException e) {
      throw new IllegalStateException("modelgate: the library handed out invalid UTF-8", e);
    }
  }
}
