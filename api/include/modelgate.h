/* modelgate.h: the C API of libmodelgate (C99; usable from C++).
 *
 * The one ABI every other runtime binds to (Python, Java). It hands out a
 * model's tensor bytes only after they matched a signature by a key the
 * caller trusts, and it reads each file through one open file descriptor:
 * the bytes verified are the bytes mapped, whatever happens to the path.
 * docs/loading.md says what each mode does and does not protect against.
 *
 * Conventions:
 *  - Every function that can fail returns an mg_status and fills *err (err
 *    may be NULL) with the stable finding id, the byte offset and a message
 *    that names the file. On MG_OK *err is cleared (status MG_OK, empty
 *    strings, offset MG_NO_OFFSET). Nothing is half-done on failure: no
 *    handle is returned, *out is set to NULL.
 *  - Handles are opaque. Pointers a handle hands out (names, shapes, tensor
 *    bytes, metadata) stay valid until that handle is freed.
 *  - Strings passed in are NUL-terminated UTF-8 unless a length is given.
 *    Strings handed out are NUL-terminated and also come with a length
 *    (names, metadata). The strict parser refuses control characters in
 *    tensor names, so a name handed out never holds a NUL; metadata values
 *    may ("\u0000" in JSON), so use the lengths.
 *  - Thread-safety: a mg_model may be used from several threads at once
 *    (lazy verification of one tensor runs once; others wait for it). A
 *    mg_keyring must not be changed while an mg_open that uses it runs.
 *  - No C++ exception, signal or abort crosses this API: an unexpected
 *    failure is MG_ERR_INTERNAL.
 */
#ifndef MODELGATE_H
#define MODELGATE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MG_API_VERSION is the version of this header's ABI; mg_api_version() is
 * the library's. A program built against version N runs with a library of
 * the same N. */
#define MG_API_VERSION 1

/* MG_NO_OFFSET: an error that is not about one byte of a file. */
#define MG_NO_OFFSET UINT64_MAX

typedef enum mg_status {
  MG_OK = 0,
  MG_ERR_ARGUMENT = 1,    /* NULL or invalid argument; index out of range; no such tensor */
  MG_ERR_IO = 2,          /* cannot open or read; not a regular file; a symlink; changed while read */
  MG_ERR_FORMAT = 3,      /* not a file the strict parser accepts (safetensors, index, bundle) */
  MG_ERR_VERIFY = 4,      /* unsigned, untrusted, bad signature, bytes differ from what was signed,
                             a file the bundle does not cover, shards of two sets */
  MG_ERR_KEY = 5,         /* a public key that does not parse, or an empty key ring */
  MG_ERR_UNSUPPORTED = 6, /* a request this build does not offer */
  MG_ERR_INTERNAL = 7     /* out of memory, or a bug; the call had no effect */
} mg_status;

typedef struct mg_error {
  mg_status status;
  char id[64];           /* stable id, e.g. "MG-SIG-TENSOR-MISMATCH"; "" when none */
  uint64_t offset;       /* byte offset in `file`; MG_NO_OFFSET when none */
  char file[1024];       /* the file the error is about; "" when none (truncated to fit) */
  char message[2048];    /* one line, UTF-8 (truncated on a character boundary to fit) */
} mg_error;

/* mg_version is the library's version ("0.1.0"); mg_api_version its ABI. */
const char* mg_version(void);
uint32_t mg_api_version(void);
/* mg_status_name: "ok", "argument", "io", "format", "verify", "key",
 * "unsupported", "internal"; "unknown" for any other value. */
const char* mg_status_name(mg_status status);

/* ---- trusted keys ------------------------------------------------------ */

/* mg_keyring holds the public keys the caller trusts: Ed25519 (embedded
 * STSIG v1 signatures and detached bundles) and ECDSA P-256/P-384/P-521
 * (detached bundles). Trust comes only from here, never from a file. */
typedef struct mg_keyring mg_keyring;

mg_status mg_keyring_new(mg_keyring** out, mg_error* err);
void mg_keyring_free(mg_keyring* keys); /* NULL is fine */
/* mg_keyring_add_pem adds one SPKI "PUBLIC KEY" PEM block of `pem_len`
 * bytes; `name` (may be NULL) labels the key in messages. */
mg_status mg_keyring_add_pem(mg_keyring* keys, const char* pem, size_t pem_len,
                             const char* name, mg_error* err);
/* mg_keyring_add_file reads a public key PEM file (name NULL: the path). */
mg_status mg_keyring_add_file(mg_keyring* keys, const char* path, const char* name,
                              mg_error* err);
size_t mg_keyring_count(const mg_keyring* keys);

/* ---- opening a verified model ------------------------------------------ */

typedef enum mg_mode {
  /* every byte hashed from the fd before anything is mapped */
  MG_MODE_EAGER = 0,
  /* signature checked up front; each tensor (embedded STSIG) or each file
   * (detached bundle: its digests are per file) hashed on first access */
  MG_MODE_LAZY = 1,
  /* data read and hashed into private read-only memory: later writes to the
   * file cannot change what was handed out */
  MG_MODE_COPY = 2
} mg_mode;

typedef enum mg_signature_kind {
  MG_SIGNATURE_ANY = 0,      /* detached when a bundle is found (then only it), else embedded */
  MG_SIGNATURE_EMBEDDED = 1, /* STSIG v1 records in each file's header; a bundle is ignored */
  MG_SIGNATURE_DETACHED = 2  /* an OpenSSF Model Signing bundle (model.sig) is required */
} mg_signature_kind;

/* MG_OPEN_WRITABLE: tensor bytes may be written by the caller without
 * changing the file or faulting: eager/lazy map MAP_PRIVATE with PROT_WRITE
 * (copy-on-write), copy mode leaves its buffer writable. For frameworks
 * whose tensors are always writable (torch). Verification is unchanged. */
#define MG_OPEN_WRITABLE 0x1u

typedef struct mg_open_options {
  size_t struct_size;          /* sizeof(mg_open_options); set by mg_open_options_init */
  mg_mode mode;                /* default MG_MODE_EAGER */
  mg_signature_kind signature; /* default MG_SIGNATURE_ANY */
  /* The detached bundle to use. NULL: DIR/model.sig for a directory (and
   * for a shard index, DIR being the index's directory), FILE.sig for a
   * file, when that exists. A bundle that is found but does not verify is
   * an error: it never falls back to embedded signatures. A bundle named
   * here for one file may be its directory's (the file is then found by its
   * path relative to the bundle's directory). */
  const char* bundle_path;
  uint32_t flags;              /* MG_OPEN_* */
  uint32_t hash_threads;       /* 0: one per core; at most 256 (else MG_ERR_ARGUMENT) */
} mg_open_options;

/* mg_open_options_init sets the defaults (and struct_size). */
void mg_open_options_init(mg_open_options* opts);

typedef struct mg_model mg_model;

/* mg_open opens `path` and verifies it against `keys` (at least one key):
 *  - a .safetensors file;
 *  - a shard index (*.safetensors.index.json): its shards, which must be
 *    exactly the files its weight_map names, signed as one set (embedded
 *    STSIG set records) or covered by the bundle together with the index;
 *  - a directory: the one shard index directly in it, else every
 *    *.safetensors file directly in it (at least one). Several files without
 *    an index must be bound into one model by a detached bundle or by their
 *    embedded set records; several separately signed files are refused
 *    (MG-SET-NOT-SIGNED): open each by its path.
 * At most 4096 safetensors files (else MG_ERR_FORMAT, "MG-API-LAYOUT").
 * Tensor names must be unique across the files. `opts` NULL: defaults.
 * Nothing is handed out unless every check the mode makes up front passed;
 * on failure *out is NULL and *err says why. No path is opened twice. */
mg_status mg_open(const char* path, const mg_keyring* keys, const mg_open_options* opts,
                  mg_model** out, mg_error* err);
void mg_model_free(mg_model* model); /* NULL is fine; invalidates every pointer it gave */

/* mg_model_file_count is the number of safetensors files (1 for a file). */
size_t mg_model_file_count(const mg_model* model);
/* mg_model_file_path is file `index`'s path (NULL when out of range). */
const char* mg_model_file_path(const mg_model* model, size_t index);

typedef struct mg_tensor_info {
  const char* name;       /* NUL-terminated; name_len bytes */
  size_t name_len;
  const char* dtype;      /* the header's spelling: "F32", "BF16", "F8_E4M3", "BOOL", ... */
  uint32_t dtype_bits;    /* element width in bits (1 byte = 8; F4 is 4) */
  uint32_t rank;
  const uint64_t* shape;  /* rank values; NULL when rank is 0 */
  uint64_t byte_length;   /* bytes of the tensor's data (little-endian elements) */
  size_t file_index;      /* which file holds it (mg_model_file_path) */
} mg_tensor_info;

/* mg_model_tensor_count: tensors across all files. Index i in
 * [0, count) orders them by name (bytewise). */
size_t mg_model_tensor_count(const mg_model* model);
mg_status mg_model_tensor_info(const mg_model* model, size_t index, mg_tensor_info* out,
                               mg_error* err);
/* mg_model_find sets *index to the tensor named `name` (name_len bytes);
 * MG_ERR_ARGUMENT (id "MG-API-NO-TENSOR") when there is none. */
mg_status mg_model_find(const mg_model* model, const char* name, size_t name_len, size_t* index,
                        mg_error* err);
/* mg_model_tensor_data sets *data / *len to the tensor's verified bytes
 * (*data may be NULL when *len is 0). Lazy mode: the first access hashes
 * the tensor (or its file) and fails on mismatch (MG_ERR_VERIFY), and every
 * later access fails the same way. Read-only memory unless MG_OPEN_WRITABLE. */
mg_status mg_model_tensor_data(const mg_model* model, size_t index, const void** data,
                               uint64_t* len, mg_error* err);
/* mg_model_check_all verifies everything lazy mode has not yet (no-op for
 * eager and copy) and returns the first failure. */
mg_status mg_model_check_all(const mg_model* model, mg_error* err);

/* Metadata: the signed __metadata__ entries of file `file_index`, sorted
 * bytewise by key, without the stsig.* signature keys. */
size_t mg_model_metadata_count(const mg_model* model, size_t file_index);
mg_status mg_model_metadata_entry(const mg_model* model, size_t file_index, size_t entry,
                                  const char** key, size_t* key_len, const char** value,
                                  size_t* value_len, mg_error* err);

/* mg_model_verification_json is a JSON object saying how the model was
 * verified (NULL for a NULL model): {"kind":"embedded"|"detached","mode":"eager"|"lazy"|"copy",
 * "keys":[{"name":...,"key_id":...}],"model":...,"version":...,
 * "bundle":{"path":...,"sha256":...}|null,"files":[{"path":...,"sha256":...|null}]}.
 * "keys" are the trusted keys whose signatures verified; "model"/"version"
 * what they signed (null when nothing was); a file's "sha256" is the
 * bundle's digest of the whole file (files method), else null. Owned by the
 * model. */
const char* mg_model_verification_json(const mg_model* model);

/* ---- scanning ----------------------------------------------------------- */

/* mg_scan judges the file or directory at `path` as `modelgate scan -f json`
 * does (policy_path NULL) or as `modelgate check --policy POLICY -f json`
 * (policy_path set), and sets *report_json to that modelgate.report/v1
 * document (free it with mg_string_free) and *verdict to the program's
 * exit code: 0 every file passed, 1 a file was rejected. A file that is
 * rejected is MG_OK with *verdict 1; an error status means no report was
 * made (unreadable path, bad policy: the program's exit 2). A file the
 * program could not judge gives that file's first finding (e.g. MG_ERR_IO,
 * "MG-IO-OPEN"); a policy that cannot be used is MG_ERR_ARGUMENT,
 * "MG-API-POLICY", with the program's message. The path "-" is the file
 * named "-" (reported as "./-"), never standard input. */
mg_status mg_scan(const char* path, const char* policy_path, char** report_json, int* verdict,
                  mg_error* err);
void mg_string_free(char* s); /* NULL is fine */

#ifdef __cplusplus
}
#endif

#endif /* MODELGATE_H */
