/* modelgate_jni.c: the JNI glue of the Java binding (dev.modelgate.Native)
 * over libmodelgate's C API (modelgate.h). C99.
 *
 * Strings cross as byte[] holding UTF-8, never through NewStringUTF /
 * GetStringUTFChars: JNI's "modified UTF-8" cannot carry a NUL or a 4-byte
 * character, and a tensor name may hold either. Every Java array is copied
 * with Get/SetByteArrayRegion (no pinning). Every failure leaves exactly one
 * Java exception pending and returns at once. */
#include <jni.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dev_modelgate_Native.h"
#include "modelgate.h"

static jclass g_exception_class;   /* dev.modelgate.ModelGateException */
static jmethodID g_exception_init; /* (I[BJ[B[B)V */
static jclass g_byte_array_class;  /* byte[] */
static jclass g_object_class;      /* java.lang.Object */

/* g_empty is where a zero-length tensor's buffer points: NewDirectByteBuffer
 * wants an address even for capacity 0, and the C API may give NULL. */
static unsigned char g_empty;

static mg_model* Model(jlong handle) { return (mg_model*)(uintptr_t)handle; }

static jclass GlobalClass(JNIEnv* env, const char* name) {
  jclass local = (*env)->FindClass(env, name);
  if (local == NULL) return NULL;
  jclass global = (jclass)(*env)->NewGlobalRef(env, local);
  (*env)->DeleteLocalRef(env, local);
  return global;
}

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM* vm, void* reserved) {
  (void)reserved;
  JNIEnv* env = NULL;
  if ((*vm)->GetEnv(vm, (void**)&env, JNI_VERSION_1_8) != JNI_OK) return JNI_ERR;
  g_exception_class = GlobalClass(env, "dev/modelgate/ModelGateException");
  if (g_exception_class == NULL) return JNI_ERR;
  g_exception_init = (*env)->GetMethodID(env, g_exception_class, "<init>", "(I[BJ[B[B)V");
  if (g_exception_init == NULL) return JNI_ERR;
  g_byte_array_class = GlobalClass(env, "[B");
  if (g_byte_array_class == NULL) return JNI_ERR;
  g_object_class = GlobalClass(env, "java/lang/Object");
  if (g_object_class == NULL) return JNI_ERR;
  return JNI_VERSION_1_8;
}

static void ThrowNew(JNIEnv* env, const char* class_name, const char* message) {
  jclass c = (*env)->FindClass(env, class_name);
  if (c != NULL) (*env)->ThrowNew(env, c, message);
}

/* Bytes is a new byte[] holding s[0, len); NULL with OutOfMemoryError
 * pending when it cannot be made. */
static jbyteArray Bytes(JNIEnv* env, const char* s, size_t len) {
  if (len > (size_t)INT32_MAX) {
    ThrowNew(env, "java/lang/OutOfMemoryError", "modelgate: string longer than a Java array");
    return NULL;
  }
  jbyteArray a = (*env)->NewByteArray(env, (jsize)len);
  if (a == NULL) return NULL;
  if (len > 0) (*env)->SetByteArrayRegion(env, a, 0, (jsize)len, (const jbyte*)s);
  return a;
}

/* BoundedLength is strlen within the cap of a fixed mg_error field, which
 * the library NUL-terminates; the bound only keeps a bug from running off. */
static size_t BoundedLength(const char* s, size_t cap) {
  size_t n = 0;
  while (n < cap && s[n] != '\0') n++;
  return n;
}

/* Throw raises a dev.modelgate.ModelGateException carrying *err. */
static void Throw(JNIEnv* env, const mg_error* err) {
  jbyteArray id = Bytes(env, err->id, BoundedLength(err->id, sizeof err->id));
  if (id == NULL) return;
  jbyteArray file = Bytes(env, err->file, BoundedLength(err->file, sizeof err->file));
  if (file == NULL) return;
  jbyteArray message = Bytes(env, err->message, BoundedLength(err->message, sizeof err->message));
  if (message == NULL) return;
  jobject e = (*env)->NewObject(env, g_exception_class, g_exception_init, (jint)err->status, id,
                                (jlong)err->offset, file, message);
  if (e != NULL) (*env)->Throw(env, (jthrowable)e);
}

/* CopyBytes copies a Java byte[] into malloc'd memory (with a NUL after
 * it, for the C strings) and sets *len; NULL with an exception pending on
 * failure. The caller frees it. */
static char* CopyBytes(JNIEnv* env, jbyteArray a, size_t* len) {
  if (a == NULL) {
    ThrowNew(env, "java/lang/NullPointerException", "modelgate: null byte array");
    return NULL;
  }
  jsize n = (*env)->GetArrayLength(env, a);
  char* out = malloc((size_t)n + 1);
  if (out == NULL) {
    ThrowNew(env, "java/lang/OutOfMemoryError", "modelgate: malloc");
    return NULL;
  }
  if (n > 0) (*env)->GetByteArrayRegion(env, a, 0, n, (jbyte*)out);
  out[n] = '\0';
  *len = (size_t)n;
  return out;
}

/* CString is CopyBytes of a byte[] the Java side NUL-terminated (and made
 * NUL-free before that): the C string is the array up to its first NUL. */
static char* CString(JNIEnv* env, jbyteArray a) {
  size_t len = 0;
  return CopyBytes(env, a, &len);
}

JNIEXPORT jint JNICALL Java_dev_modelgate_Native_apiVersion(JNIEnv* env, jclass cls) {
  (void)env;
  (void)cls;
  return (jint)mg_api_version();
}

JNIEXPORT jint JNICALL Java_dev_modelgate_Native_headerApiVersion(JNIEnv* env, jclass cls) {
  (void)env;
  (void)cls;
  return MG_API_VERSION;
}

JNIEXPORT jbyteArray JNICALL Java_dev_modelgate_Native_version(JNIEnv* env, jclass cls) {
  (void)cls;
  const char* v = mg_version();
  return Bytes(env, v, strlen(v));
}

/* AddKeys adds each PEM of `pems` (labelled by `names`) to `keys`; false
 * with an exception pending on the first failure. */
static int AddKeys(JNIEnv* env, mg_keyring* keys, jobjectArray pems, jobjectArray names) {
  jsize count = (*env)->GetArrayLength(env, pems);
  if ((*env)->GetArrayLength(env, names) != count) {
    ThrowNew(env, "java/lang/IllegalArgumentException", "modelgate: one name per key");
    return 0;
  }
  for (jsize i = 0; i < count; i++) {
    jbyteArray pem_array = (jbyteArray)(*env)->GetObjectArrayElement(env, pems, i);
    if ((*env)->ExceptionCheck(env)) return 0;
    jbyteArray name_array = (jbyteArray)(*env)->GetObjectArrayElement(env, names, i);
    if ((*env)->ExceptionCheck(env)) return 0;
    size_t pem_len = 0;
    char* pem = CopyBytes(env, pem_array, &pem_len);
    if (pem == NULL) return 0;
    char* name = CString(env, name_array);
    if (name == NULL) {
      free(pem);
      return 0;
    }
    mg_error err;
    mg_status s = mg_keyring_add_pem(keys, pem, pem_len, name, &err);
    free(name);
    free(pem);
    (*env)->DeleteLocalRef(env, pem_array);
    (*env)->DeleteLocalRef(env, name_array);
    if (s != MG_OK) {
      Throw(env, &err);
      return 0;
    }
  }
  return 1;
}

JNIEXPORT jlong JNICALL Java_dev_modelgate_Native_open(JNIEnv* env, jclass cls, jbyteArray path,
                                                       jobjectArray pems, jobjectArray names,
                                                       jint mode, jint signature,
                                                       jbyteArray bundle, jint flags,
                                                       jint hash_threads) {
  (void)cls;
  if (pems == NULL || names == NULL) {
    ThrowNew(env, "java/lang/NullPointerException", "modelgate: null key list");
    return 0;
  }
  mg_error err;
  mg_keyring* keys = NULL;
  if (mg_keyring_new(&keys, &err) != MG_OK) {
    Throw(env, &err);
    return 0;
  }
  mg_model* model = NULL;
  char* cpath = NULL;
  char* cbundle = NULL;
  mg_open_options opts;
  mg_open_options_init(&opts);
  if (!AddKeys(env, keys, pems, names)) goto done;
  cpath = CString(env, path);
  if (cpath == NULL) goto done;
  if (bundle != NULL) {
    cbundle = CString(env, bundle);
    if (cbundle == NULL) goto done;
  }
  opts.mode = (mg_mode)mode;
  opts.signature = (mg_signature_kind)signature;
  opts.bundle_path = cbundle;
  opts.flags = (uint32_t)flags;
  opts.hash_threads = (uint32_t)hash_threads;
  /* The key ring is only read during mg_open (modelgate.h): it is freed
   * below whatever the outcome. */
  if (mg_open(cpath, keys, &opts, &model, &err) != MG_OK) {
    model = NULL;
    Throw(env, &err);
  }
done:
  free(cbundle);
  free(cpath);
  mg_keyring_free(keys);
  return (jlong)(uintptr_t)model;
}

JNIEXPORT void JNICALL Java_dev_modelgate_Native_free(JNIEnv* env, jclass cls, jlong model) {
  (void)env;
  (void)cls;
  mg_model_free(Model(model));
}

JNIEXPORT jlong JNICALL Java_dev_modelgate_Native_fileCount(JNIEnv* env, jclass cls, jlong model) {
  (void)env;
  (void)cls;
  return (jlong)mg_model_file_count(Model(model));
}

JNIEXPORT jbyteArray JNICALL Java_dev_modelgate_Native_filePath(JNIEnv* env, jclass cls,
                                                                jlong model, jlong index) {
  (void)cls;
  if (index < 0) return NULL;
  const char* p = mg_model_file_path(Model(model), (size_t)index);
  return p == NULL ? NULL : Bytes(env, p, strlen(p));
}

JNIEXPORT jlong JNICALL Java_dev_modelgate_Native_tensorCount(JNIEnv* env, jclass cls,
                                                              jlong model) {
  (void)env;
  (void)cls;
  return (jlong)mg_model_tensor_count(Model(model));
}

/* ArgumentError fills *err as the library would for an index this glue
 * refuses before calling it (a negative Java long). */
static void ArgumentError(mg_error* err, const char* message) {
  memset(err, 0, sizeof *err);
  err->status = MG_ERR_ARGUMENT;
  err->offset = MG_NO_OFFSET;
  strncpy(err->message, message, sizeof err->message - 1);
}

JNIEXPORT jobjectArray JNICALL Java_dev_modelgate_Native_tensorInfo(JNIEnv* env, jclass cls,
                                                                    jlong model, jlong index) {
  (void)cls;
  mg_error err;
  if (index < 0) {
    ArgumentError(&err, "negative tensor index");
    Throw(env, &err);
    return NULL;
  }
  mg_tensor_info info;
  if (mg_model_tensor_info(Model(model), (size_t)index, &info, &err) != MG_OK) {
    Throw(env, &err);
    return NULL;
  }
  if (info.rank > (uint32_t)INT32_MAX) {
    ThrowNew(env, "java/lang/OutOfMemoryError", "modelgate: rank larger than a Java array");
    return NULL;
  }
  jobjectArray out = (*env)->NewObjectArray(env, 4, g_object_class, NULL);
  if (out == NULL) return NULL;
  jbyteArray name = Bytes(env, info.name, info.name_len);
  if (name == NULL) return NULL;
  (*env)->SetObjectArrayElement(env, out, 0, name);
  jbyteArray dtype = Bytes(env, info.dtype, strlen(info.dtype));
  if (dtype == NULL) return NULL;
  (*env)->SetObjectArrayElement(env, out, 1, dtype);
  jlongArray shape = (*env)->NewLongArray(env, (jsize)info.rank);
  if (shape == NULL) return NULL;
  for (uint32_t i = 0; i < info.rank; i++) {
    /* A dimension above INT64_MAX reads as negative: VerifiedModel refuses it. */
    jlong dim = (jlong)info.shape[i];
    (*env)->SetLongArrayRegion(env, shape, (jsize)i, 1, &dim);
  }
  (*env)->SetObjectArrayElement(env, out, 2, shape);
  jlong sizes[3] = {(jlong)info.byte_length, (jlong)info.file_index, (jlong)info.dtype_bits};
  jlongArray size_array = (*env)->NewLongArray(env, 3);
  if (size_array == NULL) return NULL;
  (*env)->SetLongArrayRegion(env, size_array, 0, 3, sizes);
  (*env)->SetObjectArrayElement(env, out, 3, size_array);
  return out;
}

JNIEXPORT jlong JNICALL Java_dev_modelgate_Native_find(JNIEnv* env, jclass cls, jlong model,
                                                       jbyteArray name) {
  (void)cls;
  size_t len = 0;
  char* cname = CopyBytes(env, name, &len);
  if (cname == NULL) return -1;
  size_t index = 0;
  mg_error err;
  mg_status s = mg_model_find(Model(model), cname, len, &index, &err);
  free(cname);
  if (s != MG_OK) {
    Throw(env, &err);
    return -1;
  }
  return (jlong)index;
}

JNIEXPORT jobject JNICALL Java_dev_modelgate_Native_data(JNIEnv* env, jclass cls, jlong model,
                                                         jlong index, jlong offset,
                                                         jlong length) {
  (void)cls;
  mg_error err;
  if (index < 0) {
    ArgumentError(&err, "negative tensor index");
    Throw(env, &err);
    return NULL;
  }
  const void* data = NULL;
  uint64_t len = 0;
  if (mg_model_tensor_data(Model(model), (size_t)index, &data, &len, &err) != MG_OK) {
    Throw(env, &err);
    return NULL;
  }
  if (offset < 0 || length < 0 || length > INT32_MAX || (uint64_t)offset > len ||
      (uint64_t)length > len - (uint64_t)offset) {
    ThrowNew(env, "java/lang/IndexOutOfBoundsException", "modelgate: range outside the tensor");
    return NULL;
  }
  if (length == 0 || data == NULL) {
    if (length != 0) {
      ThrowNew(env, "java/lang/IllegalStateException", "modelgate: tensor without data");
      return NULL;
    }
    return (*env)->NewDirectByteBuffer(env, &g_empty, 0);
  }
  /* Java sees a writable buffer over memory that may be mapped read-only:
   * the Java side hands out only read-only views of it. */
  unsigned char* start = (unsigned char*)(uintptr_t)data + offset;
  return (*env)->NewDirectByteBuffer(env, start, length);
}

JNIEXPORT void JNICALL Java_dev_modelgate_Native_checkAll(JNIEnv* env, jclass cls, jlong model) {
  (void)cls;
  mg_error err;
  if (mg_model_check_all(Model(model), &err) != MG_OK) Throw(env, &err);
}

JNIEXPORT jlong JNICALL Java_dev_modelgate_Native_metadataCount(JNIEnv* env, jclass cls,
                                                                jlong model, jlong file) {
  (void)env;
  (void)cls;
  if (file < 0) return 0;
  return (jlong)mg_model_metadata_count(Model(model), (size_t)file);
}

JNIEXPORT jobjectArray JNICALL Java_dev_modelgate_Native_metadataEntry(JNIEnv* env, jclass cls,
                                                                       jlong model, jlong file,
                                                                       jlong entry) {
  (void)cls;
  mg_error err;
  if (file < 0 || entry < 0) {
    ArgumentError(&err, "negative metadata index");
    Throw(env, &err);
    return NULL;
  }
  const char* key = NULL;
  const char* value = NULL;
  size_t key_len = 0;
  size_t value_len = 0;
  if (mg_model_metadata_entry(Model(model), (size_t)file, (size_t)entry, &key, &key_len, &value,
                              &value_len, &err) != MG_OK) {
    Throw(env, &err);
    return NULL;
  }
  jobjectArray out = (*env)->NewObjectArray(env, 2, g_byte_array_class, NULL);
  if (out == NULL) return NULL;
  jbyteArray k = Bytes(env, key, key_len);
  if (k == NULL) return NULL;
  (*env)->SetObjectArrayElement(env, out, 0, k);
  jbyteArray v = Bytes(env, value, value_len);
  if (v == NULL) return NULL;
  (*env)->SetObjectArrayElement(env, out, 1, v);
  return out;
}

JNIEXPORT jbyteArray JNICALL Java_dev_modelgate_Native_verificationJson(JNIEnv* env, jclass cls,
                                                                        jlong model) {
  (void)cls;
  const char* j = mg_model_verification_json(Model(model));
  if (j == NULL) j = "";
  return Bytes(env, j, strlen(j));
}

JNIEXPORT jobjectArray JNICALL Java_dev_modelgate_Native_scan(JNIEnv* env, jclass cls,
                                                              jbyteArray path,
                                                              jbyteArray policy) {
  (void)cls;
  char* cpath = CString(env, path);
  if (cpath == NULL) return NULL;
  char* cpolicy = NULL;
  if (policy != NULL) {
    cpolicy = CString(env, policy);
    if (cpolicy == NULL) {
      free(cpath);
      return NULL;
    }
  }
  char* report = NULL;
  int verdict = 2;
  mg_error err;
  mg_status s = mg_scan(cpath, cpolicy, &report, &verdict, &err);
  free(cpolicy);
  free(cpath);
  if (s != MG_OK) {
    mg_string_free(report);
    Throw(env, &err);
    return NULL;
  }
  if (report == NULL) {
    ThrowNew(env, "java/lang/IllegalStateException", "modelgate: mg_scan gave no report");
    return NULL;
  }
  jbyteArray json = Bytes(env, report, strlen(report));
  mg_string_free(report);
  if (json == NULL) return NULL;
  jintArray verdict_array = (*env)->NewIntArray(env, 1);
  if (verdict_array == NULL) return NULL;
  jint v = (jint)verdict;
  (*env)->SetIntArrayRegion(env, verdict_array, 0, 1, &v);
  jobjectArray out = (*env)->NewObjectArray(env, 2, g_object_class, NULL);
  if (out == NULL) return NULL;
  (*env)->SetObjectArrayElement(env, out, 0, json);
  (*env)->SetObjectArrayElement(env, out, 1, verdict_array);
  return out;
}
