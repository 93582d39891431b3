package dev.modelgate;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * Tensor is one verified tensor of a {@link VerifiedModel}: its name, dtype as the file spells it
 * ("F32", "BF16", "I64", "F8_E4M3", "BOOL", ...), shape, and bytes.
 *
 * <p>The bytes are little-endian, as the safetensors format stores every element, whatever the
 * host: {@link #data()} is already {@link ByteOrder#LITTLE_ENDIAN}, so {@code getFloat(i * 4)}
 * reads element i. Beware that {@code slice()} and {@code duplicate()} return buffers in Java's
 * default order, BIG_ENDIAN: re-apply {@code .order(ByteOrder.LITTLE_ENDIAN)} to what they
 * return, or use {@link #data(long, int)} for a range.
 */
public final class Tensor {
  private final VerifiedModel model;
  private final long index;
  private final String name;
  private final String dtype;
  private final long[] shape;
  private final long byteLength;
  private final int dtypeBits;
  private final int fileIndex;
  private final ByteBuffer base; // null when byteLength > Integer.MAX_VALUE

  Tensor(
      VerifiedModel model,
      long index,
      String name,
      String dtype,
      long[] shape,
      long byteLength,
      int dtypeBits,
      int fileIndex,
      ByteBuffer base) {
    this.model = model;
    this.index = index;
    this.name = name;
    this.dtype = dtype;
    this.shape = shape;
    this.byteLength = byteLength;
    this.dtypeBits = dtypeBits;
    this.fileIndex = fileIndex;
    this.base = base;
  }

  public String name() {
    return name;
  }

  /** dtype is the header's spelling of the element type. */
  public String dtype() {
    return dtype;
  }

  /** dtypeBits is the element width in bits (F4 is 4). */
  public int dtypeBits() {
    return dtypeBits;
  }

  /** shape is a copy of the dimensions; empty for a scalar. */
  public long[] shape() {
    return shape.clone();
  }

  /** byteLength is the number of bytes of the tensor's data. */
  public long byteLength() {
    return byteLength;
  }

  /** fileIndex is which file holds the tensor ({@link VerifiedModel#filePath(int)}). */
  public int fileIndex() {
    return fileIndex;
  }

  /**
   * data is the whole tensor as a new read-only, little-endian, direct buffer (position 0, limit
   * byteLength) over the verified memory; each call returns a new view of the same bytes.
   *
   * @throws IllegalStateException once the model was closed (buffers taken before stay valid).
   * @throws UnsupportedOperationException when the tensor is larger than a ByteBuffer can be
   *     (2 GiB - 1 bytes): read it in ranges with {@link #data(long, int)}.
   */
  public ByteBuffer data() {
    model.checkOpen();
    if (base == null) {
      throw new UnsupportedOperationException(
          "tensor \"" + name + "\" has " + byteLength + " bytes, more than one ByteBuffer holds;"
              + " use data(offset, length)");
    }
    return base.duplicate().order(ByteOrder.LITTLE_ENDIAN);
  }

  /**
   * data is bytes [byteOffset, byteOffset + length) of the tensor, as {@link #data()} is the
   * whole.
   *
   * @throws IndexOutOfBoundsException when the range is not inside the tensor.
   * @throws ModelGateException when the model cannot hand the bytes out.
   */
  public ByteBuffer data(long byteOffset, int length) throws ModelGateException {
    model.checkOpen();
    if (byteOffset < 0 || length < 0 || byteOffset > byteLength - length) {
      throw new IndexOutOfBoundsException(
          "range [" + byteOffset + ", +" + length + ") of tensor \"" + name + "\" ("
              + byteLength + " bytes)");
    }
    if (base != null) {
      return base.slice((int) byteOffset, length).order(ByteOrder.LITTLE_ENDIAN);
    }
    return model.slice(index, byteOffset, length);
  }

  @Override
  public String toString() {
    return "Tensor[" + name + ", " + dtype + ", " + java.util.Arrays.toString(shape) + "]";
  }
}
