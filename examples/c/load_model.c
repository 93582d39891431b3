/* load_model: open a signed safetensors model through libmodelgate's C API
 * and print what a model server would get. C99; builds against the
 * installed files with nothing but the C compiler and pkg-config:
 *
 *   cc -std=c99 load_model.c $(pkg-config --cflags --libs modelgate) -o load_model
 *   load_model --pubkey KEY.pub [--pubkey KEY2.pub ...] [--mode eager|lazy|copy] MODEL
 *
 * MODEL is a .safetensors file, a shard index or a model directory. Prints
 * each tensor's name, dtype, shape and byte length and, for F32, its first
 * values. Exit status as the modelgate program's: 0 loaded and verified,
 * 1 rejected (unsigned, untrusted, tampered, malformed: "ID: message" on
 * stderr), 2 a usage error or a file or key that could not be read.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <modelgate.h>

enum { kExitPass = 0, kExitRejected = 1, kExitCannotJudge = 2 };
enum { kMaxKeys = 16, kShownValues = 4 };

static int usage(const char* why) {
  fprintf(stderr,
          "load_model: %s\n"
          "usage: load_model --pubkey KEY.pub [--pubkey ...] [--mode eager|lazy|copy] MODEL\n",
          why);
  return kExitCannotJudge;
}

/* fail prints err as "ID: message" (the message names the file) and picks
 * the exit status: only a judgement against the model is a rejection; a
 * file or key that could not be read, or a failure of the library itself,
 * means the model was not judged. */
static int fail(const mg_error* err) {
  fprintf(stderr, "%s: %s\n", err->id[0] != '\0' ? err->id : mg_status_name(err->status),
          err->message);
  if (err->status == MG_ERR_VERIFY || err->status == MG_ERR_FORMAT) return kExitRejected;
  return kExitCannotJudge;
}

/* print_name prints a tensor name quoted, escaping every byte outside
 * printable ASCII: a name comes from the file and may hold NUL, newlines or
 * terminal escapes. */
static void print_name(const char* name, size_t len) {
  size_t i;
  putchar('"');
  for (i = 0; i < len; ++i) {
    const unsigned char c = (unsigned char)name[i];
    if (c == '"' || c == '\\') {
      printf("\\%c", c);
    } else if (c >= 0x20 && c < 0x7f) {
      putchar(c);
    } else {
      printf("\\x%02x", c);
    }
  }
  putchar('"');
}

/* f32_le decodes the little-endian F32 at p whatever the host's byte order:
 * the file is little-endian, the host need not be. */
static float f32_le(const unsigned char* p) {
  const uint32_t bits = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                        (uint32_t)p[3] << 24;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static void print_tensor(const mg_tensor_info* t, const void* data, uint64_t len) {
  uint32_t d;
  printf("  ");
  print_name(t->name, t->name_len);
  printf("  %s  [", t->dtype);
  for (d = 0; d < t->rank; ++d) printf("%s%" PRIu64, d ? ", " : "", t->shape[d]);
  printf("]  %" PRIu64 " bytes", t->byte_length);
  if (strcmp(t->dtype, "F32") == 0) {
    const unsigned char* bytes = (const unsigned char*)data;
    const uint64_t count = len / 4;
    uint64_t i;
    printf(" ");
    for (i = 0; i < count && i < kShownValues; ++i) printf(" %g", (double)f32_le(bytes + 4 * i));
    if (count > kShownValues) printf(" ...");
  }
  printf("\n");
}

int main(int argc, char** argv) {
  const char* key_paths[kMaxKeys];
  int key_count = 0;
  const char* model_path = NULL;
  mg_open_options opts;
  mg_keyring* keys = NULL;
  mg_model* model = NULL;
  mg_error err;
  int status = kExitPass;
  int i;
  size_t t;

  mg_open_options_init(&opts);
  for (i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if ((strcmp(a, "--pubkey") == 0 || strcmp(a, "--mode") == 0) && i + 1 >= argc) {
      return usage("--pubkey and --mode need a value");
    }
    if (strcmp(a, "--pubkey") == 0) {
      if (key_count == kMaxKeys) return usage("too many --pubkey");
      key_paths[key_count++] = argv[++i];
    } else if (strcmp(a, "--mode") == 0) {
      const char* m = argv[++i];
      if (strcmp(m, "eager") == 0) {
        opts.mode = MG_MODE_EAGER;
      } else if (strcmp(m, "lazy") == 0) {
        opts.mode = MG_MODE_LAZY;
      } else if (strcmp(m, "copy") == 0) {
        opts.mode = MG_MODE_COPY;
      } else {
        return usage("unknown mode (eager, lazy or copy)");
      }
    } else if (a[0] == '-') {
      return usage("unknown option");
    } else if (model_path == NULL) {
      model_path = a;
    } else {
      return usage("one model at a time");
    }
  }
  if (key_count == 0) return usage("at least one --pubkey is required");
  if (model_path == NULL) return usage("no model given");

  /* Trust comes from these keys only, never from the file. */
  if (mg_keyring_new(&keys, &err) != MG_OK) return fail(&err);
  for (i = 0; i < key_count; ++i) {
    if (mg_keyring_add_file(keys, key_paths[i], NULL, &err) != MG_OK) {
      mg_keyring_free(keys);
      return fail(&err);
    }
  }

  if (mg_open(model_path, keys, &opts, &model, &err) != MG_OK) {
    mg_keyring_free(keys);
    return fail(&err);
  }
  /* Lazy mode has checked only the signature so far: say so. */
  printf("%s: %s, %zu tensors, %zu file%s\n", model_path,
         opts.mode == MG_MODE_LAZY ? "signature verified (lazy: each tensor is checked when read)"
         : opts.mode == MG_MODE_COPY ? "verified (copy)"
                                     : "verified (eager)",
         mg_model_tensor_count(model), mg_model_file_count(model),
         mg_model_file_count(model) == 1 ? "" : "s");

  /* Every tensor's bytes are fetched, F32 or not: in lazy mode this is
   * where each is verified, and a mismatch fails the load. */
  for (t = 0; t < mg_model_tensor_count(model); ++t) {
    mg_tensor_info info;
    const void* data = NULL;
    uint64_t len = 0;
    if (mg_model_tensor_info(model, t, &info, &err) != MG_OK ||
        mg_model_tensor_data(model, t, &data, &len, &err) != MG_OK) {
      status = fail(&err);
      break;
    }
    print_tensor(&info, data, len);
  }

  mg_model_free(model);
  mg_keyring_free(keys);
  return status;
}
