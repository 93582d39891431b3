package dev.modelgate;

import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.Charset;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.security.PublicKey;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.Objects;

/**
 * ModelGate opens safetensors models verified against public keys the caller trusts, through
 * libmodelgate's C API: nothing is handed out before it matched a signature by one of those keys,
 * and every file is read through one open file descriptor, so the bytes verified are the bytes
 * mapped whatever happens to the path meanwhile.
 *
 * <pre>{@code
 * PublicKey key = KeyFactory.getInstance("Ed25519")   // "EC" for ECDSA P-256/384/521
 *     .generatePublic(new X509EncodedKeySpec(spkiDer));
 * try (VerifiedModel model = ModelGate.openVerified(Path.of("model.safetensors"), List.of(key))) {
 *   Tensor t = model.tensor("layer.weight");
 *   ByteBuffer data = t.data();        // read-only, ByteOrder.LITTLE_ENDIAN, over the mapping
 *   float first = data.getFloat(0);
 * }
 * }</pre>
 *
 * <p>DJL ({@code ai.djl.ndarray}) takes the buffer as it is; its PyTorch engine wraps a direct
 * buffer's memory without copying and keeps the buffer referenced from the NDArray, which keeps
 * the verified mapping alive (see {@link VerifiedModel}). PyTorch tensors are writable, so open
 * with {@link Options#withWritable(boolean) withWritable(true)} (copy-on-write) when the NDArray
 * might be changed in place:
 *
 * <pre>{@code
 * Options opts = Options.defaults().withWritable(true);
 * try (VerifiedModel model = ModelGate.openVerified(dir, keys, opts);
 *     NDManager manager = NDManager.newBaseManager()) {
 *   Tensor t = model.tensor("layer.weight");               // dtype "F32"
 *   NDArray w = manager.create(t.data(), new Shape(t.shape()), DataType.FLOAT32);
 * }
 * }</pre>
 */
public final class ModelGate {
  private ModelGate() {}

  /** Mode is how the bytes are checked (modelgate.h's mg_mode). */
  public enum Mode {
    /** Every byte hashed from the file descriptor before anything is handed out. */
    EAGER(0),
    /**
     * The signature is checked at open; each tensor (embedded signatures) or each file (detached
     * bundle) is hashed on first access, and that access fails on a mismatch.
     */
    LAZY(1),
    /** Read and hashed into private memory: later writes to the file change nothing handed out. */
    COPY(2);

    final int code;

    Mode(int code) {
      this.code = code;
    }
  }

  /** Signature says which signatures to use (modelgate.h's mg_signature_kind). */
  public enum Signature {
    /** A detached bundle when one is found (then only it), else embedded signatures. */
    ANY(0),
    /** STSIG records in each file's header; a bundle is ignored. */
    EMBEDDED(1),
    /** An OpenSSF Model Signing bundle is required. */
    DETACHED(2);

    final int code;

    Signature(int code) {
      this.code = code;
    }
  }

  /**
   * Options for {@link #openVerified(Path, List, Options)}; immutable, each {@code with*} returns
   * a changed copy.
   */
  public static final class Options {
    private static final int FLAG_WRITABLE = 0x1;

    private final Mode mode;
    private final Signature signature;
    private final Path bundle;
    private final boolean writable;
    private final int hashThreads;

    private Options(
        Mode mode, Signature signature, Path bundle, boolean writable, int hashThreads) {
      this.mode = mode;
      this.signature = signature;
      this.bundle = bundle;
      this.writable = writable;
      this.hashThreads = hashThreads;
    }

    /** defaults: EAGER, Signature.ANY, the bundle found beside the model, read-only memory. */
    public static Options defaults() {
      return new Options(Mode.EAGER, Signature.ANY, null, false, 0);
    }

    /** withMode sets the mode. */
    public Options withMode(Mode m) {
      Objects.requireNonNull(m, "mode");
      return new Options(m, signature, bundle, writable, hashThreads);
    }

    /** withSignature sets which signatures to use. */
    public Options withSignature(Signature s) {
      Objects.requireNonNull(s, "signature");
      return new Options(mode, s, bundle, writable, hashThreads);
    }

    /**
     * withBundle names the detached bundle; null: DIR/model.sig for a directory, FILE.sig for a
     * file, when that exists. A bundle that is found but does not verify is an error: it never
     * falls back to embedded signatures.
     */
    public Options withBundle(Path b) {
      return new Options(mode, signature, b, writable, hashThreads);
    }

    /**
     * withWritable(true) maps copy-on-write (copy mode: a writable private copy), for native
     * consumers that may write through a buffer's address (DJL's PyTorch engine): their writes
     * never reach the file nor fault. The ByteBuffers stay read-only; verification is unchanged.
     */
    public Options withWritable(boolean w) {
      return new Options(mode, signature, bundle, w, hashThreads);
    }

    /** withHashThreads sets the hashing threads; 0 (the default): one per core. */
    public Options withHashThreads(int n) {
      if (n < 0) {
        throw new IllegalArgumentException("hashThreads < 0: " + n);
      }
      return new Options(mode, signature, bundle, writable, n);
    }

    public Mode mode() {
      return mode;
    }

    public Signature signature() {
      return signature;
    }

    /** bundle is the detached bundle's path, or null. */
    public Path bundle() {
      return bundle;
    }

    public boolean writable() {
      return writable;
    }

    public int hashThreads() {
      return hashThreads;
    }
  }

  /** version is libmodelgate's version, e.g. "0.1.0". */
  public static String version() {
    return new String(Native.version(), StandardCharsets.UTF_8);
  }

  /** openVerified is {@link #openVerified(Path, List, Options)} with the default options. */
  public static VerifiedModel openVerified(Path path, List<? extends PublicKey> trustedKeys)
      throws ModelGateException {
    return openVerified(path, trustedKeys, Options.defaults());
  }

  /**
   * openVerified opens {@code path} (a .safetensors file, a shard index, or a directory of
   * shards) and verifies it against {@code trustedKeys}: Ed25519 keys (embedded STSIG signatures
   * and detached bundles) or EC P-256/P-384/P-521 keys (detached bundles). Each key must have an
   * X.509 SubjectPublicKeyInfo encoding ({@code getEncoded()}, format "X.509"), as the JDK's
   * Ed25519 and EC keys do; an empty list fails with status KEY.
   *
   * @throws ModelGateException when the model does not verify, cannot be read or parsed, or a key
   *     does not parse; nothing is handed out then.
   * @throws IllegalArgumentException for a key without an X.509 encoding, or a path the platform
   *     cannot spell as bytes.
   */
  public static VerifiedModel openVerified(
      Path path, List<? extends PublicKey> trustedKeys, Options options)
      throws ModelGateException {
    Objects.requireNonNull(path, "path");
    Objects.requireNonNull(options, "options");
    // A snapshot: the list cannot change under the loop (List.copyOf also refuses a null key).
    Objects.requireNonNull(trustedKeys, "trustedKeys");
    List<? extends PublicKey> keys = List.copyOf(trustedKeys);
    byte[][] pems = new byte[keys.size()][];
    byte[][] names = new byte[keys.size()][];
    int i = 0;
    for (PublicKey key : keys) {
      pems[i] = pem(key, i);
      names[i] = cString("key " + i + " (" + key.getAlgorithm() + ")", StandardCharsets.UTF_8);
      i++;
    }
    byte[] bundle = options.bundle() == null ? null : pathBytes(options.bundle());
    long model =
        Native.open(
            pathBytes(path),
            pems,
            names,
            options.mode().code,
            options.signature().code,
            bundle,
            options.writable() ? Options.FLAG_WRITABLE : 0,
            options.hashThreads());
    return new VerifiedModel(new Handle(model), options.mode());
  }

  /** scan is {@link #scan(Path, Path) scan(path, null)}: the default rules, no policy. */
  public static ScanReport scan(Path path) throws ModelGateException {
    return scan(path, null);
  }

  /**
   * scan judges the file or directory at {@code path} without loading anything, as {@code
   * modelgate scan -f json PATH} does ({@code policy} null) or as {@code modelgate check --policy
   * POLICY -f json PATH}. A rejected file is a report that did not pass, not an exception.
   *
   * @throws ModelGateException when no report could be made: an unreadable path (the file's first
   *     finding, e.g. MG-IO-OPEN), a policy that cannot be used (MG-API-POLICY).
   */
  public static ScanReport scan(Path path, Path policy) throws ModelGateException {
    Objects.requireNonNull(path, "path");
    Object[] r = Native.scan(pathBytes(path), policy == null ? null : pathBytes(policy));
    return new ScanReport(
        new String((byte[]) r[0], StandardCharsets.UTF_8), ((int[]) r[1])[0]);
  }

  /** pem is the "PUBLIC KEY" PEM block of key's SubjectPublicKeyInfo DER. */
  private static byte[] pem(PublicKey key, int index) {
    byte[] der = key.getEncoded();
    if (der == null || !"X.509".equals(key.getFormat())) {
      throw new IllegalArgumentException(
          "trustedKeys["
              + index
              + "] ("
              + key.getAlgorithm()
              + ") has no X.509 SubjectPublicKeyInfo encoding (format "
              + key.getFormat()
              + ")");
    }
    String body = Base64.getMimeEncoder(64, new byte[] {'\n'}).encodeToString(der);
    String text = "-----BEGIN PUBLIC KEY-----\n" + body + "\n-----END PUBLIC KEY-----\n";
    return text.getBytes(StandardCharsets.US_ASCII);
  }

  /**
   * pathBytes spells a path as the bytes the platform's own file APIs would pass to open(2)
   * (sun.jnu.encoding), NUL-terminated; a path that charset cannot spell, or with a NUL, is
   * refused rather than replaced by '?' and opened as another file.
   */
  static byte[] pathBytes(Path p) {
    return cString(p.toString(), filenameCharset());
  }

  private static Charset filenameCharset() {
    String name = System.getProperty("sun.jnu.encoding");
    try {
      return name == null ? StandardCharsets.UTF_8 : Charset.forName(name);
    } catch (IllegalArgumentException e) {
      return StandardCharsets.UTF_8;
    }
  }

  /** cString encodes s strictly and appends a NUL; s must hold no NUL. */
  private static byte[] cString(String s, Charset cs) {
    if (s.indexOf('\0') >= 0) {
      throw new IllegalArgumentException("a NUL character in \"" + s.replace("\0", "\\0") + "\"");
    }
    byte[] b = encodeStrict(s, cs);
    return Arrays.copyOf(b, b.length + 1);
  }

  /** encodeStrict encodes s or throws IllegalArgumentException (unpaired surrogate, unmappable). */
  static byte[] encodeStrict(String s, Charset cs) {
    try {
      ByteBuffer b =
          cs.newEncoder()
              .onMalformedInput(CodingErrorAction.REPORT)
              .onUnmappableCharacter(CodingErrorAction.REPORT)
              .encode(CharBuffer.wrap(s));
      byte[] out = new byte[b.remaining()];
      b.get(out);
      return out;
    } catch (CharacterCodingException e) {
      throw new IllegalArgumentException("\"" + s + "\" cannot be encoded in " + cs, e);
    }
  }
}
