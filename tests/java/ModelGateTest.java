import dev.modelgate.ModelGate;
import dev.modelgate.ModelGate.Mode;
import dev.modelgate.ModelGate.Options;
import dev.modelgate.ModelGateException;
import dev.modelgate.ScanReport;
import dev.modelgate.Tensor;
import dev.modelgate.VerifiedModel;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.lang.ref.Reference;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.ReadOnlyBufferException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.KeyFactory;
import java.security.PublicKey;
import java.security.spec.X509EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Stream;

/**
 * ModelGateTest checks the Java binding end to end on models it makes itself: safetensors files
 * written here from the format's spec (8-byte little-endian header length, JSON header,
 * little-endian data), signed and keyed with the built {@code modelgate} program. A plain program
 * (Debian's JDK has no JUnit): every check prints on failure, the exit status is 1 when any
 * failed.
 *
 * <p>usage: java -Dmodelgate.jni.library=LIB -cp JARS ModelGateTest MODELGATE WORKDIR
 */
public final class ModelGateTest {
  private static int checks;
  private static int failures;

  private static Path modelgate;
  private static Path work;

  // The tensors of the embedded-signature model, in file order.
  private static final float[] WEIGHT = {0.5f, 1.5f, -2.25f, 3.0e38f, Float.MIN_VALUE, -0.0f};
  private static final long[] IDS = {-1L, (1L << 40) + 3, Long.MIN_VALUE, 0x0102030405060708L};
  private static final byte[] BYTES = {1, 2, (byte) 255};
  private static final byte[] BF16 = {(byte) 0x80, 0x3f, 0x00, (byte) 0xc0}; // 1.0, -2.0
  private static final String UNICODE_NAME = "emb.\u00e9\u2603"; // "emb.é☃"
  private static final String NOTE = "h\u00e9llo \u2603 \ud83d\ude00"; // a 4-byte UTF-8 character

  private ModelGateTest() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 2) {
      System.err.println("usage: ModelGateTest MODELGATE WORKDIR");
      System.exit(2);
    }
    modelgate = Path.of(args[0]).toAbsolutePath();
    work = Path.of(args[1]).toAbsolutePath();
    deleteTree(work);
    Files.createDirectories(work);

    run("keygen", "--out", work.resolve("trusted").toString());
    run("keygen", "--out", work.resolve("other").toString());
    run("keygen", "--alg", "ecdsa-p256", "--out", work.resolve("ec").toString());
    PublicKey trusted = readPublicKey(work.resolve("trusted.pub"), "Ed25519");
    PublicKey other = readPublicKey(work.resolve("other.pub"), "Ed25519");
    PublicKey ec = readPublicKey(work.resolve("ec.pub"), "EC");

    Path unsigned = work.resolve("unsigned.safetensors");
    long unsignedHeaderLength = writeModel(unsigned);
    Path signed = work.resolve("model.safetensors");
    run("sign", "-q", "--key", work.resolve("trusted.key").toString(), "-o", signed.toString(),
        unsigned.toString());

    section("the libraries loaded", ModelGateTest::librariesLoaded);
    section("byte order of the header length", () -> headerLength(unsigned, unsignedHeaderLength));
    section("version",
        () -> check("0.1.0".equals(ModelGate.version()), "version " + ModelGate.version()));
    for (Mode mode : Mode.values()) {
      section("signed model, " + mode, () -> signedModel(signed, trusted, mode));
    }
    section("tampered model", () -> tampered(signed, trusted));
    section("keys", () -> keys(signed, unsigned, trusted, other));
    section("sharded set, embedded signatures", () -> sharded(trusted));
    section("ECDSA detached directory", () -> detached(ec, trusted));
    section("scan", () -> scan(signed));
    section("use after close", () -> afterClose(signed, trusted));
    section("buffers keep the model mapped", () -> lifetime(signed, trusted));
    section("threads", () -> threads(signed, trusted));

    System.out.println(checks + " checks, " + failures + " failed");
    System.exit(failures == 0 && checks > 0 ? 0 : 1);
  }

  // ---- fixtures -------------------------------------------------------------------------------

  /**
   * writeModel writes a safetensors file by the format's spec: u64 little-endian header length,
   * the JSON header (padded with spaces to 8 bytes), then the tensors' little-endian bytes.
   * Returns the header length it wrote.
   */
  private static long writeModel(Path path) throws IOException {
    ByteBuffer weight = ByteBuffer.allocate(WEIGHT.length * 4).order(ByteOrder.LITTLE_ENDIAN);
    for (float f : WEIGHT) {
      weight.putFloat(f);
    }
    ByteBuffer ids = ByteBuffer.allocate(IDS.length * 8).order(ByteOrder.LITTLE_ENDIAN);
    for (long v : IDS) {
      ids.putLong(v);
    }
    List<Object[]> tensors = new ArrayList<>();
    tensors.add(new Object[] {"weight", "F32", "[2,3]", weight.array()});
    tensors.add(new Object[] {"ids", "I64", "[4]", ids.array()});
    tensors.add(new Object[] {"empty", "F32", "[0]", new byte[0]});
    tensors.add(new Object[] {UNICODE_NAME, "U8", "[3]", BYTES});
    tensors.add(new Object[] {"bf16", "BF16", "[2]", BF16});
    Map<String, String> metadata = Map.of("format", "pt", "note", NOTE);
    return writeSafetensors(path, tensors, metadata);
  }

  private static long writeSafetensors(Path path, List<Object[]> tensors, Map<String, String> meta)
      throws IOException {
    StringBuilder json = new StringBuilder("{\"__metadata__\":{");
    String sep = "";
    for (Map.Entry<String, String> e : meta.entrySet()) {
      json.append(sep).append('"').append(e.getKey()).append("\":\"").append(e.getValue())
          .append('"');
      sep = ",";
    }
    json.append('}');
    ByteArrayOutputStream data = new ByteArrayOutputStream();
    for (Object[] t : tensors) {
      byte[] bytes = (byte[]) t[3];
      json.append(",\"").append(t[0]).append("\":{\"dtype\":\"").append(t[1])
          .append("\",\"shape\":").append(t[2]).append(",\"data_offsets\":[")
          .append(data.size()).append(',').append(data.size() + bytes.length).append("]}");
      data.write(bytes);
    }
    json.append('}');
    byte[] header = json.toString().getBytes(StandardCharsets.UTF_8);
    int padded = (header.length + 7) / 8 * 8;
    ByteBuffer out = ByteBuffer.allocate(8 + padded + data.size()).order(ByteOrder.LITTLE_ENDIAN);
    out.putLong(padded).put(header);
    for (int i = header.length; i < padded; i++) {
      out.put((byte) ' ');
    }
    out.put(data.toByteArray());
    Files.write(path, out.array());
    return padded;
  }

  /** readPublicKey reads a "PUBLIC KEY" PEM file as the JDK does: SPKI DER, X509EncodedKeySpec. */
  private static PublicKey readPublicKey(Path pem, String algorithm) throws Exception {
    String text = Files.readString(pem, StandardCharsets.US_ASCII);
    String body = text.replace("-----BEGIN PUBLIC KEY-----", "")
        .replace("-----END PUBLIC KEY-----", "").replaceAll("\\s", "");
    byte[] der = Base64.getDecoder().decode(body);
    return KeyFactory.getInstance(algorithm).generatePublic(new X509EncodedKeySpec(der));
  }

  /** headerLengthOf reads a safetensors file's header length the right way. */
  private static long headerLengthOf(Path file) throws IOException {
    byte[] first = new byte[8];
    try (var in = Files.newInputStream(file)) {
      check(in.readNBytes(first, 0, 8) == 8, "8 bytes of " + file);
    }
    return ByteBuffer.wrap(first).order(ByteOrder.LITTLE_ENDIAN).getLong(0);
  }

  // ---- checks ---------------------------------------------------------------------------------

  /**
   * headerLength shows the hand-rolled reader's bug the issue names: ByteBuffer's default order
   * is big-endian and getInt reads 4 bytes, so getInt(0) misreads the u64 little-endian header
   * length; order(LITTLE_ENDIAN).getLong(0) reads it.
   */
  private static void headerLength(Path file, long written) throws IOException {
    byte[] bytes = Files.readAllBytes(file);
    ByteBuffer raw = ByteBuffer.wrap(bytes);
    check(raw.order() == ByteOrder.BIG_ENDIAN, "a new ByteBuffer is big-endian");
    long wrong = raw.getInt(0);
    long right = raw.duplicate().order(ByteOrder.LITTLE_ENDIAN).getLong(0);
    check(right == written, "LITTLE_ENDIAN getLong(0) = " + right + ", written " + written);
    check(wrong != written, "default-order getInt(0) = " + wrong + " is not the length " + written);
    check(bytes[8] == '{' && 8 + right <= bytes.length, "the header starts at 8 and fits");
    String header = new String(bytes, 8, (int) right, StandardCharsets.UTF_8).strip();
    check(header.endsWith("}"), "the header ends where the little-endian length says");
  }

  private static void signedModel(Path file, PublicKey key, Mode mode) throws Exception {
    Options opts = Options.defaults().withMode(mode);
    try (VerifiedModel m = ModelGate.openVerified(file, List.of(key), opts)) {
      check(m.mode() == mode, "mode " + m.mode());
      check(m.fileCount() == 1, "fileCount " + m.fileCount());
      check(m.filePath(0).getFileName().equals(file.getFileName()), "filePath " + m.filePath(0));
      check(m.tensorNames().equals(List.of("bf16", UNICODE_NAME, "empty", "ids", "weight")),
          "tensorNames in bytewise order: " + m.tensorNames());

      Tensor w = m.tensor("weight");
      check(w.name().equals("weight") && w.dtype().equals("F32") && w.dtypeBits() == 32,
          "weight dtype " + w);
      check(java.util.Arrays.equals(w.shape(), new long[] {2, 3}), "weight shape");
      check(w.byteLength() == 24, "weight byteLength " + w.byteLength());
      ByteBuffer b = w.data();
      check(b.isDirect() && b.isReadOnly(), "direct and read-only");
      check(b.order() == ByteOrder.LITTLE_ENDIAN, "order " + b.order());
      check(b.position() == 0 && b.remaining() == 24, "position 0, 24 bytes");
      for (int i = 0; i < WEIGHT.length; i++) {
        check(Float.floatToRawIntBits(b.getFloat(i * 4)) == Float.floatToRawIntBits(WEIGHT[i]),
            "weight[" + i + "] = " + b.getFloat(i * 4) + ", written " + WEIGHT[i]);
      }
      FloatBuffer fb = b.asFloatBuffer();
      check(fb.get(1) == 1.5f && fb.get(2) == -2.25f, "asFloatBuffer keeps little-endian");
      check(w.data(4, 8).getFloat(0) == 1.5f && w.data(4, 8).remaining() == 8, "data(4, 8)");
      expectThrows(ReadOnlyBufferException.class, () -> b.put(0, (byte) 1), "put on the buffer");
      expectThrows(IndexOutOfBoundsException.class, () -> w.data(20, 8), "data(20, 8)");
      expectThrows(IndexOutOfBoundsException.class, () -> w.data(-1, 1), "data(-1, 1)");

      Tensor ids = m.tensor("ids");
      check(ids.dtype().equals("I64") && java.util.Arrays.equals(ids.shape(), new long[] {4}),
          "ids dtype/shape " + ids);
      ByteBuffer ib = ids.data();
      for (int i = 0; i < IDS.length; i++) {
        check(ib.getLong(i * 8) == IDS[i], "ids[" + i + "] = " + ib.getLong(i * 8));
      }
      // duplicate() and slice() reset the order to BIG_ENDIAN: the same bytes misread.
      ByteBuffer dup = ids.data().duplicate();
      check(dup.order() == ByteOrder.BIG_ENDIAN, "duplicate() is big-endian");
      check(dup.getLong(24) == 0x0807060504030201L, "big-endian misreads 0x0102030405060708");

      Tensor empty = m.tensor("empty");
      check(empty.byteLength() == 0 && empty.data().remaining() == 0, "empty tensor");
      check(java.util.Arrays.equals(empty.shape(), new long[] {0}), "empty shape");
      Tensor u = m.tensor(UNICODE_NAME);
      byte[] got = new byte[3];
      u.data().get(got);
      check(u.name().equals(UNICODE_NAME) && u.dtype().equals("U8") && u.dtypeBits() == 8
          && java.util.Arrays.equals(got, BYTES), "non-ASCII name and U8 bytes");

      Tensor bf = m.tensor("bf16");
      ByteBuffer bb = bf.data();
      check(bf.dtype().equals("BF16") && bf.dtypeBits() == 16 && bf.byteLength() == 4,
          "BF16 " + bf);
      check(Float.intBitsToFloat((bb.getShort(0) & 0xffff) << 16) == 1.0f
          && Float.intBitsToFloat((bb.getShort(2) & 0xffff) << 16) == -2.0f, "BF16 values");
      // The name crosses with its length: a C string would stop at the NUL and find "weight".
      expectMg("MG-API-NO-TENSOR", () -> m.tensor("weight\0x"), "\"weight\\0x\" is not \"weight\"");
      Map<String, String> meta = m.metadata();
      check(meta.equals(Map.of("format", "pt", "note", NOTE)), "metadata " + meta);
      check(List.copyOf(meta.keySet()).equals(List.of("format", "note")), "metadata order");

      ModelGateException e = expectMg("MG-API-NO-TENSOR", () -> m.tensor("absent"), "no tensor");
      check(e == null || e.status() == ModelGateException.Status.ARGUMENT, "no tensor: ARGUMENT");
      String json = m.verificationJson();
      String modeName = mode.name().toLowerCase(java.util.Locale.ROOT);
      check(json.contains("\"embedded\"") && json.contains("\"" + modeName + "\""),
          "verificationJson " + json);
      m.checkAll();
    }
    writable(file, key, mode);
  }

  /**
   * writable: withWritable(true) memory takes a write through the buffer's address, as a native
   * consumer (DJL's PyTorch engine) would make, without faulting and without changing the file.
   * Without it the memory is read-only and the same write would kill the JVM (SIGSEGV), which a
   * test cannot show. The address and the write go through reflection (--add-opens
   * java.base/java.nio), as a native library would get them through JNI.
   */
  private static void writable(Path file, PublicKey key, Mode mode) throws Exception {
    byte[] before = Files.readAllBytes(file);
    Options writable = Options.defaults().withMode(mode).withWritable(true);
    try (VerifiedModel m = ModelGate.openVerified(file, List.of(key), writable)) {
      ByteBuffer b = m.tensor("weight").data();
      check(b.isReadOnly() && b.getFloat(0) == 0.5f, "writable: read-only buffer, same bytes");
      java.lang.reflect.Field address = java.nio.Buffer.class.getDeclaredField("address");
      address.setAccessible(true);
      Class<?> unsafeClass = Class.forName("sun.misc.Unsafe");
      java.lang.reflect.Field theUnsafe = unsafeClass.getDeclaredField("theUnsafe");
      theUnsafe.setAccessible(true);
      unsafeClass.getMethod("putFloat", long.class, float.class)
          .invoke(theUnsafe.get(null), address.getLong(b), 42.0f);
      check(b.getFloat(0) == 42.0f, "writable: the write is seen through the buffer");
      check(m.tensor("weight").data().getFloat(0) == 42.0f, "writable: and by the model");
    }
    check(java.util.Arrays.equals(Files.readAllBytes(file), before), "writable: file unchanged");
    try (VerifiedModel m = ModelGate.openVerified(file, List.of(key), Options.defaults())) {
      check(m.tensor("weight").data().getFloat(0) == 0.5f, "writable: the file still verifies");
    }
  }

  private static void tampered(Path signed, PublicKey key) throws Exception {
    // The first byte of "weight"'s data: 8 + the little-endian header length.
    byte[] bytes = Files.readAllBytes(signed);
    long dataStart = 8 + headerLengthOf(signed);
    bytes[(int) dataStart] ^= 0x01;
    Path bad = work.resolve("tampered.safetensors");
    Files.write(bad, bytes);

    for (Mode mode : new Mode[] {Mode.EAGER, Mode.COPY}) {
      ModelGateException e = expectMg("MG-SIG-TENSOR-MISMATCH",
          () -> ModelGate.openVerified(bad, List.of(key), Options.defaults().withMode(mode)),
          "tampered, " + mode);
      if (e != null) {
        check(e.status() == ModelGateException.Status.VERIFY, "status " + e.status());
        check(e.file().endsWith("tampered.safetensors"), "file " + e.file());
        check(e.offset() == dataStart,
            "offset " + e.offset() + ", the data starts at " + dataStart);
        check(e.getMessage().contains("weight"), "message names the tensor: " + e.getMessage());
        check(e.toString().contains("MG-SIG-TENSOR-MISMATCH"), "toString " + e);
      }
    }
    try (VerifiedModel m =
        ModelGate.openVerified(bad, List.of(key), Options.defaults().withMode(Mode.LAZY))) {
      check(m.tensor("ids").data().getLong(24) == IDS[3], "lazy: an untouched tensor reads");
      expectMg("MG-SIG-TENSOR-MISMATCH", () -> m.tensor("weight"), "lazy: tensor() fails");
      expectMg("MG-SIG-TENSOR-MISMATCH", () -> m.tensor("weight"), "lazy: and again");
      expectMg("MG-SIG-TENSOR-MISMATCH", m::checkAll, "lazy: checkAll");
    }
  }

  private static void keys(Path signed, Path unsigned, PublicKey trusted, PublicKey other)
      throws Exception {
    ModelGateException e = expectMg("MG-SIG-UNTRUSTED",
        () -> ModelGate.openVerified(signed, List.of(other)), "untrusted key");
    check(e == null || e.status() == ModelGateException.Status.VERIFY, "untrusted: VERIFY");
    try (VerifiedModel m = ModelGate.openVerified(signed, List.of(other, trusted))) {
      check(m.tensor("weight").data().getFloat(0) == 0.5f, "one trusted key among two");
    }
    try (VerifiedModel m = ModelGate.openVerified(signed, List.of(trusted),
        Options.defaults().withHashThreads(1).withSignature(ModelGate.Signature.EMBEDDED))) {
      check(m.tensor("ids").data().getLong(0) == IDS[0], "one hash thread, embedded only");
    }
    expectThrows(IllegalArgumentException.class, () -> Options.defaults().withHashThreads(-1),
        "withHashThreads(-1)");
    expectMg("MG-API-NO-BUNDLE", () -> ModelGate.openVerified(signed, List.of(trusted),
        Options.defaults().withSignature(ModelGate.Signature.DETACHED)),
        "DETACHED required, no bundle");
    expectMg("MG-SIG-MISSING", () -> ModelGate.openVerified(unsigned, List.of(trusted)),
        "unsigned");
    e = expectThrows(ModelGateException.class,
        () -> ModelGate.openVerified(signed, List.of()), "no key");
    check(e == null || e.status() == ModelGateException.Status.KEY, "no key: KEY " + e);
    e = expectThrows(ModelGateException.class,
        () -> ModelGate.openVerified(work.resolve("absent.safetensors"), List.of(trusted)),
        "missing file");
    check(e == null || e.status() == ModelGateException.Status.IO, "missing file: IO " + e);
    PublicKey raw = new PublicKey() {
      private static final long serialVersionUID = 1L;

      @Override
      public String getAlgorithm() {
        return "Ed25519";
      }

      @Override
      public String getFormat() {
        return "RAW";
      }

      @Override
      public byte[] getEncoded() {
        return new byte[32];
      }
    };
    expectThrows(IllegalArgumentException.class,
        () -> ModelGate.openVerified(signed, List.of(raw)), "a key without X.509 encoding");
  }

  /** writeShards writes a two-shard model with its index; b.ids holds {42, second}. */
  private static void writeShards(Path dir, long second) throws IOException {
    Files.createDirectories(dir);
    ByteBuffer a =
        ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putFloat(0.25f).putFloat(-8f);
    writeSafetensors(dir.resolve("model-00001-of-00002.safetensors"),
        List.<Object[]>of(new Object[] {"a.w", "F32", "[2]", a.array()}), Map.of("format", "pt"));
    ByteBuffer b =
        ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN).putLong(42).putLong(second);
    writeSafetensors(dir.resolve("model-00002-of-00002.safetensors"),
        List.<Object[]>of(new Object[] {"b.ids", "I64", "[2]", b.array()}), Map.of("format", "pt"));
    Files.writeString(dir.resolve("model.safetensors.index.json"),
        "{\"metadata\":{\"total_size\":24},\"weight_map\":{"
            + "\"a.w\":\"model-00001-of-00002.safetensors\","
            + "\"b.ids\":\"model-00002-of-00002.safetensors\"}}");
  }

  /**
   * sharded: a directory with a shard index, signed as one set (modelgate sign DIR), opens as one
   * model by the directory or by its index; a shard from another signed set is refused.
   */
  private static void sharded(PublicKey key) throws Exception {
    Path dir = work.resolve("sharded");
    writeShards(dir, -42);
    run("sign", "-q", "--key", work.resolve("trusted.key").toString(), dir.toString());
    Path index = dir.resolve("model.safetensors.index.json");
    for (Path p : List.of(dir, index)) {
      try (VerifiedModel m = ModelGate.openVerified(p, List.of(key))) {
        check(m.fileCount() == 2, p.getFileName() + ": two files");
        check(m.tensorNames().equals(List.of("a.w", "b.ids")), "names " + m.tensorNames());
        Tensor b = m.tensor("b.ids");
        check(b.data().getLong(8) == -42, "b.ids[1]");
        check(m.filePath(b.fileIndex()).getFileName().toString()
            .equals("model-00002-of-00002.safetensors"), "b.ids is in shard 2");
        check(m.tensor("a.w").data().getFloat(4) == -8f, "a.w[1]");
      }
    }
    Path other = work.resolve("sharded-other");
    writeShards(other, -43);
    run("sign", "-q", "--key", work.resolve("trusted.key").toString(), other.toString());
    Path mixed = work.resolve("sharded-mixed");
    copyTree(dir, mixed);
    Files.copy(other.resolve("model-00002-of-00002.safetensors"),
        mixed.resolve("model-00002-of-00002.safetensors"), StandardCopyOption.REPLACE_EXISTING);
    ModelGateException e = expectMg("MG-SET-DIGEST",
        () -> ModelGate.openVerified(mixed, List.of(key)), "shards of two sets");
    check(e == null || e.status() == ModelGateException.Status.VERIFY, "two sets: VERIFY " + e);
  }

  private static void detached(PublicKey ec, PublicKey ed25519) throws Exception {
    Path dir = work.resolve("detached");
    Files.createDirectories(dir);
    ByteBuffer a =
        ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putFloat(0.25f).putFloat(-8f);
    writeSafetensors(dir.resolve("a.safetensors"),
        List.<Object[]>of(new Object[] {"a.w", "F32", "[2]", a.array()}), Map.of("format", "pt"));
    ByteBuffer b = ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN).putLong(42).putLong(-42);
    writeSafetensors(dir.resolve("b.safetensors"),
        List.<Object[]>of(new Object[] {"b.ids", "I64", "[2]", b.array()}), Map.of("format", "pt"));
    run("sign", "-q", "--detached", "--key", work.resolve("ec.key").toString(), dir.toString());
    check(Files.isRegularFile(dir.resolve("model.sig")), "sign --detached wrote model.sig");

    for (Mode mode : Mode.values()) {
      try (VerifiedModel m =
          ModelGate.openVerified(dir, List.of(ec), Options.defaults().withMode(mode))) {
        check(m.fileCount() == 2, mode + ": two files");
        check(m.tensorNames().equals(List.of("a.w", "b.ids")), mode + ": names " + m.tensorNames());
        check(m.tensor("a.w").data().getFloat(4) == -8f, mode + ": a.w[1]");
        check(m.tensor("b.ids").data().getLong(8) == -42, mode + ": b.ids[1]");
        check(m.verificationJson().contains("\"detached\""), mode + ": detached");
        check(m.metadata(1).equals(Map.of("format", "pt")), mode + ": metadata(1)");
      }
    }
    expectMg("MG-OMS-UNTRUSTED", () -> ModelGate.openVerified(dir, List.of(ed25519)),
        "detached, another key");

    // A bundle named by Options, outside the directory.
    Path moved = work.resolve("detached-copy");
    copyTree(dir, moved);
    Path bundle = work.resolve("elsewhere.sig");
    Files.move(moved.resolve("model.sig"), bundle);
    Options withBundle = Options.defaults().withBundle(bundle)
        .withSignature(ModelGate.Signature.DETACHED);
    try (VerifiedModel m = ModelGate.openVerified(moved, List.of(ec), withBundle)) {
      check(m.tensor("b.ids").data().getLong(0) == 42, "withBundle: b.ids[0]");
    }

    // One byte of b.safetensors changed after signing: eager refuses the model, lazy the file.
    Path bad = work.resolve("detached-tampered");
    copyTree(dir, bad);
    byte[] bytes = Files.readAllBytes(bad.resolve("b.safetensors"));
    bytes[bytes.length - 1] ^= 0x01;
    Files.write(bad.resolve("b.safetensors"), bytes);
    for (Mode mode : new Mode[] {Mode.EAGER, Mode.COPY}) {
      ModelGateException e = expectMg("MG-OMS-FILE-CHANGED",
          () -> ModelGate.openVerified(bad, List.of(ec), Options.defaults().withMode(mode)),
          "detached tampered, " + mode);
      check(e == null || (e.status() == ModelGateException.Status.VERIFY
          && e.file().endsWith("b.safetensors")), "detached tampered: " + e);
    }
    try (VerifiedModel m =
        ModelGate.openVerified(bad, List.of(ec), Options.defaults().withMode(Mode.LAZY))) {
      check(m.tensor("a.w").data().getFloat(0) == 0.25f, "lazy: the untouched file reads");
      expectMg("MG-OMS-FILE-CHANGED", () -> m.tensor("b.ids"), "lazy: the changed file fails");
      expectMg("MG-OMS-FILE-CHANGED", () -> m.tensor("b.ids"), "lazy: and again");
      check(m.tensor("a.w").data().getFloat(4) == -8f, "lazy: the untouched file still reads");
    }
  }

  private static void scan(Path signed) throws Exception {
    ScanReport good = ModelGate.scan(signed);
    check(good.passed() && good.verdict() == 0, "scan: the signed model passes");
    check(good.json().contains("\"modelgate.report/v1\""), "scan: the report's schema");
    Path trailing = work.resolve("trailing.safetensors");
    byte[] bytes = Files.readAllBytes(signed);
    Files.write(trailing, java.util.Arrays.copyOf(bytes, bytes.length + 5));
    ScanReport bad = ModelGate.scan(trailing);
    check(!bad.passed() && bad.verdict() == 1, "scan: trailing bytes are rejected");
    check(bad.json().contains("\"MG-ST-TRAILING-BYTES\""), "scan: the finding " + bad.json());
    ModelGateException e = expectMg("MG-IO-OPEN",
        () -> ModelGate.scan(work.resolve("absent.safetensors")), "scan: a missing file");
    check(e == null || e.status() == ModelGateException.Status.IO, "scan: missing is IO");
    expectMg("MG-API-POLICY", () -> ModelGate.scan(signed, work.resolve("absent.yaml")),
        "scan: a policy that cannot be read");
  }

  private static void afterClose(Path file, PublicKey key) throws Exception {
    VerifiedModel m = ModelGate.openVerified(file, List.of(key));
    Tensor t = m.tensor("weight");
    ByteBuffer before = t.data();
    m.close();
    m.close();
    expectThrows(IllegalStateException.class, m::tensorNames, "tensorNames");
    expectThrows(IllegalStateException.class, () -> m.tensor("weight"), "tensor");
    expectThrows(IllegalStateException.class, m::metadata, "metadata");
    expectThrows(IllegalStateException.class, m::fileCount, "fileCount");
    expectThrows(IllegalStateException.class, () -> m.filePath(0), "filePath");
    expectThrows(IllegalStateException.class, m::checkAll, "checkAll");
    expectThrows(IllegalStateException.class, m::verificationJson, "verificationJson");
    expectThrows(IllegalStateException.class, m::mode, "mode");
    expectThrows(IllegalStateException.class, t::data, "Tensor.data()");
    expectThrows(IllegalStateException.class, () -> t.data(0, 4), "Tensor.data(0, 4)");
    check(before.getFloat(4) == 1.5f, "a buffer taken before close still reads the bytes");
    check(!m.isReleased(), "not released while that buffer is reachable");
    Reference.reachabilityFence(before);
  }

  /**
   * lifetime: after close() the mapping stays while any buffer or view of one is reachable, and
   * goes once none is (the Cleaner). The file's mapping is looked up in /proc/self/maps.
   */
  private static void lifetime(Path signed, PublicKey key) throws Exception {
    Path file = work.resolve("lifetime.safetensors");
    Files.copy(signed, file);
    VerifiedModel m = ModelGate.openVerified(file, List.of(key));
    Tensor t = m.tensor("weight");
    FloatBuffer view = t.data().slice(4, 8).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer();
    m.close();
    check(mapped(file), "mapped after close while buffers are reachable");
    gc();
    check(!m.isReleased(), "a Tensor and a FloatBuffer view: not released");
    Reference.reachabilityFence(t);
    t = null;
    gc();
    check(!m.isReleased(), "a FloatBuffer view of a slice alone: not released");
    check(view.get(0) == 1.5f && view.get(1) == -2.25f, "the view reads the verified bytes");
    Reference.reachabilityFence(view);
    view = null;
    for (int i = 0; i < 200 && !m.isReleased(); i++) {
      gc();
    }
    check(m.isReleased(), "released once no buffer is reachable");
    check(!mapped(file), "unmapped once released");

    // A model never closed is released once it and its buffers are unreachable.
    Path forgotten = work.resolve("forgotten.safetensors");
    Files.copy(signed, forgotten);
    openAndDrop(forgotten, key);
    for (int i = 0; i < 200 && mapped(forgotten); i++) {
      gc();
    }
    check(!mapped(forgotten), "a model never closed is unmapped after GC");
  }

  private static void openAndDrop(Path file, PublicKey key) throws Exception {
    VerifiedModel m = ModelGate.openVerified(file, List.of(key));
    check(m.tensor("weight").data().getFloat(0) == 0.5f, "forgotten model reads");
    check(mapped(file), "forgotten model is mapped");
  }

  private static void threads(Path signed, PublicKey key) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(4);
    try {
      // Lazy mode: four threads verify and read the same tensors at once.
      try (VerifiedModel m =
          ModelGate.openVerified(signed, List.of(key), Options.defaults().withMode(Mode.LAZY))) {
        List<Callable<Boolean>> readers = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
          readers.add(() -> {
            for (int j = 0; j < 200; j++) {
              if (m.tensor("weight").data().getFloat(8) != -2.25f
                  || m.tensor("ids").data().getLong(8) != IDS[1]) {
                return false;
              }
            }
            return true;
          });
        }
        for (Future<Boolean> f : pool.invokeAll(readers)) {
          check(f.get(), "concurrent lazy reads");
        }
      }
      // close() racing with readers: each call reads right or throws IllegalStateException.
      VerifiedModel m = ModelGate.openVerified(signed, List.of(key));
      AtomicBoolean started = new AtomicBoolean();
      List<Future<String>> racers = new ArrayList<>();
      for (int i = 0; i < 4; i++) {
        racers.add(pool.submit(() -> {
          for (long n = 0; ; n++) {
            try {
              if (m.tensor("ids").data().getLong(24) != IDS[3]) {
                return "wrong value";
              }
              started.set(true);
            } catch (IllegalStateException closed) {
              return n > 0 ? "" : "closed before the first read";
            }
          }
        }));
      }
      while (!started.get()) {
        Thread.onSpinWait();
      }
      m.close();
      for (Future<String> f : racers) {
        String r = f.get(30, TimeUnit.SECONDS);
        check(r.isEmpty() || r.startsWith("closed before"), "close() racing readers: " + r);
      }
    } finally {
      pool.shutdownNow();
    }
  }

  /**
   * librariesLoaded checks the files in system property modelgate.test.expect (comma-separated)
   * are mapped into this process: the test ran against the libraries it was meant to (the build
   * tree's, or an installed prefix's found without any property).
   */
  private static void librariesLoaded() throws IOException {
    ModelGate.version();
    String expect = System.getProperty("modelgate.test.expect", "");
    check(!expect.isEmpty(), "-Dmodelgate.test.expect names the libraries to be loaded");
    for (String lib : expect.split(",")) {
      check(mapped(Path.of(lib)), "loaded " + Path.of(lib).toRealPath());
    }
  }

  // ---- helpers --------------------------------------------------------------------------------

  private static boolean mapped(Path file) throws IOException {
    String name = file.toRealPath().toString();
    try (Stream<String> lines = Files.lines(Path.of("/proc/self/maps"))) {
      return lines.anyMatch(l -> l.endsWith(" " + name));
    }
  }

  private static void gc() throws InterruptedException {
    System.gc();
    Thread.sleep(20);
  }

  private static void run(String... args) throws Exception {
    List<String> cmd = new ArrayList<>();
    cmd.add(modelgate.toString());
    cmd.addAll(List.of(args));
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    if (p.waitFor() != 0) {
      throw new IllegalStateException(
          String.join(" ", cmd) + ": exit " + p.exitValue() + "\n" + out);
    }
  }

  private static void copyTree(Path from, Path to) throws IOException {
    Files.createDirectories(to);
    try (Stream<Path> files = Files.list(from)) {
      for (Path f : (Iterable<Path>) files::iterator) {
        Files.copy(f, to.resolve(f.getFileName()), StandardCopyOption.REPLACE_EXISTING);
      }
    }
  }

  private static void deleteTree(Path dir) throws IOException {
    if (!Files.exists(dir)) {
      return;
    }
    try (Stream<Path> all = Files.walk(dir)) {
      for (Path p : (Iterable<Path>) all.sorted(Comparator.reverseOrder())::iterator) {
        Files.delete(p);
      }
    }
  }

  private interface Body {
    void run() throws Exception;
  }

  private static void section(String name, Body body) {
    System.out.println("-- " + name);
    try {
      body.run();
    } catch (Exception | Error e) {
      failures++;
      System.out.println("FAIL: " + name + ": unexpected " + e);
      e.printStackTrace(System.out);
    }
  }

  private static void check(boolean ok, String what) {
    checks++;
    if (!ok) {
      failures++;
      System.out.println("FAIL: " + what);
    }
  }

  /** expectThrows runs body and checks it throws a c; returns it, or null when it did not. */
  private static <T extends Throwable> T expectThrows(Class<T> c, Body body, String what) {
    checks++;
    try {
      body.run();
    } catch (Throwable t) {
      if (c.isInstance(t)) {
        System.out.println("   " + what + ": " + t);
        return c.cast(t);
      }
      failures++;
      System.out.println("FAIL: " + what + ": expected " + c.getSimpleName() + ", got " + t);
      return null;
    }
    failures++;
    System.out.println("FAIL: " + what + ": expected " + c.getSimpleName() + ", nothing thrown");
    return null;
  }

  /** expectMg checks body throws a ModelGateException with finding id {@code id}. */
  private static ModelGateException expectMg(String id, Body body, String what) {
    ModelGateException e = expectThrows(ModelGateException.class, body, what);
    check(e == null || id.equals(e.findingId()), what + ": id " + (e == null ? "" : e.toString()));
    return e;
  }
}
