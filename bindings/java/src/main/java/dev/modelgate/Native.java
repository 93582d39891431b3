package dev.modelgate;

import java.net.URI;
import java.net.URISyntaxException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.CodeSource;

/**
 * Native declares the JNI glue (native/modelgate_jni.c) over libmodelgate's C API. Handles are
 * {@code mg_model*} as a long; strings cross as UTF-8 byte arrays, never as JNI "modified UTF-8"
 * (which cannot carry a NUL or a supplementary character, and tensor names may hold both).
 * Callers keep a handle alive across each call (see {@link Handle}).
 */
final class Native {
  /** API_VERSION is modelgate.h's MG_API_VERSION this binding was written against. */
  static final int API_VERSION = 1;

  static {
    load();
    int headerVersion = headerApiVersion();
    int libraryVersion = apiVersion();
    if (headerVersion != API_VERSION || libraryVersion != API_VERSION) {
      throw new UnsatisfiedLinkError(
          "modelgate: the JNI library was built against API "
              + headerVersion
              + " and runs with libmodelgate API "
              + libraryVersion
              + "; this jar needs API "
              + API_VERSION);
    }
  }

  private Native() {}

  /**
   * load finds libmodelgate_jni.so: the path in system property {@code modelgate.jni.library}
   * when set (only that one: a wrong path is an error, not a reason to load another library); else
   * the one installed beside this jar (the jar in DATADIR/java, the library in LIBDIR, as {@code
   * cmake --install} lays them out, wherever the prefix); else {@code java.library.path}.
   */
  private static void load() {
    String explicit = System.getProperty("modelgate.jni.library");
    if (explicit != null && !explicit.isEmpty()) {
      System.load(Path.of(explicit).toAbsolutePath().toString());
      return;
    }
    Path installed = installedLibrary();
    if (installed != null) {
      System.load(installed.toString());
      return;
    }
    System.loadLibrary("modelgate_jni");
  }

  private static Path installedLibrary() {
    try {
      CodeSource source = Native.class.getProtectionDomain().getCodeSource();
      if (source == null || source.getLocation() == null) {
        return null;
      }
      // Only a jar on the file system: a jar nested in another ("jar:" URLs) has no beside.
      URI uri = source.getLocation().toURI();
      if (!"file".equals(uri.getScheme())) {
        return null;
      }
      Path jar = Path.of(uri);
      Path dir = jar.getParent();
      if (dir == null || !Files.isRegularFile(jar)) {
        return null;
      }
      Path lib = dir.resolve(BuildConfig.JAR_TO_LIBDIR).resolve(BuildConfig.JNI_LIBRARY_NAME);
      return Files.isRegularFile(lib) ? lib.toAbsolutePath().normalize() : null;
    } catch (URISyntaxException | RuntimeException e) {
      // No installed layout to find (a URL that is no path, no permission): the next way.
      return null;
    }
  }

  static native int apiVersion();

  static native int headerApiVersion();

  static native byte[] version();

  /**
   * open builds a key ring from {@code pems} (SPKI PEM blocks; {@code keyNames} label them,
   * NUL-free UTF-8), opens {@code path} and frees the ring. Returns the {@code mg_model*}.
   */
  static native long open(
      byte[] path,
      byte[][] pems,
      byte[][] keyNames,
      int mode,
      int signature,
      byte[] bundlePath,
      int flags,
      int hashThreads)
      throws ModelGateException;

  static native void free(long model);

  static native long fileCount(long model);

  static native byte[] filePath(long model, long index);

  static native long tensorCount(long model);

  /**
   * tensorInfo is {byte[] name, byte[] dtype, long[] shape, long[] {byteLength, fileIndex,
   * dtypeBits}}.
   */
  static native Object[] tensorInfo(long model, long index) throws ModelGateException;

  static native long find(long model, byte[] name) throws ModelGateException;

  /**
   * data is a direct buffer over bytes [offset, offset + length) of tensor {@code index}'s
   * verified memory (lazy mode verifies first). The buffer is writable as far as Java knows and
   * the memory may be read-only: callers hand out only read-only views of it.
   */
  static native ByteBuffer data(long model, long index, long offset, long length)
      throws ModelGateException;

  static native void checkAll(long model) throws ModelGateException;

  static native long metadataCount(long model, long file);

  /** metadataEntry is {byte[] key, byte[] value}. */
  static native byte[][] metadataEntry(long model, long file, long entry)
      throws ModelGateException;

  static native byte[] verificationJson(long model);

  /**
   * scan is mg_scan: {byte[] reportJson, int[] {verdict}}; policy null: no policy (scan), else
   * as check --policy.
   */
  static native Object[] scan(byte[] path, byte[] policy) throws ModelGateException;
}
