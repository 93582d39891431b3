// The allowlist (exact module/qualname pairs that plain weight files need),
// the named set of code-execution globals, and the Python 2 name mapping.
// Only exact pairs are safe: a dotted qualname walks attributes (protocol 4
// getattribute), so `torch._utils.os.system` is never "in torch._utils".
#include <algorithm>
#include <array>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "modelgate/scanner.h"
#include "pickle_internal.h"

namespace modelgate::scanner {
namespace {

using pickle_internal::MapPy2Name;
using pickle_internal::ValueType;

std::string Join(std::string_view a, std::string_view b) {
  std::string s(a);
  s.push_back('.');
  s.append(b);
  return s;
}

// PairKey is the exact (module, qualname) key of the allowlist: "torch" +
// "_utils._rebuild_tensor_v2" is a walk, not the allowlisted pair.
std::string PairKey(std::string_view module, std::string_view qualname) {
  std::string s(module);
  s.push_back('\n');
  s.append(qualname);
  return s;
}

// torch's weights-only set (torch/_weights_only_unpickler.py
// _get_allowed_globals), numpy's array reconstruction, joblib's array
// wrappers and plain value types.
const std::unordered_set<std::string>& SafeGlobals() {
  static const std::unordered_set<std::string> kSafe = [] {
    std::unordered_set<std::string> s = {
        "collections.OrderedDict",
        "collections.Counter",
        "collections.defaultdict",  // ValueType: conditional on the arguments
        "collections.deque",
        "datetime.datetime",
        "datetime.date",
        "datetime.time",
        "datetime.timedelta",
        "datetime.timezone",
        "decimal.Decimal",
        "fractions.Fraction",
        "torch.nn.parameter.Parameter",
        "torch.serialization._get_layout",
        "torch.Size",
        "torch.Tensor",
        "torch.device",
        "torch.storage.UntypedStorage",
        "torch.storage.TypedStorage",
        "torch.UntypedStorage",
        "torch.TypedStorage",
        "torch._tensor._rebuild_from_type_v2",
        "torch.tensor._rebuild_from_type_v2",  // torch.load maps torch.tensor -> torch._tensor
        "torch.storage._load_from_bytes",      // nesting loader: its argument is scanned
        "torch.per_tensor_affine",
        "torch.per_tensor_symmetric",
        "torch.per_channel_affine",
        "torch.per_channel_symmetric",
        "torch.per_channel_affine_float_qparams",
        "_codecs.encode",
        "builtins.bytearray",
        "builtins.bytes",
        "builtins.set",
        "builtins.frozenset",
        "builtins.complex",
        "builtins.slice",
        "builtins.range",
        "builtins.int",
        "builtins.float",
        "builtins.bool",
        "builtins.str",
        "builtins.tuple",
        "builtins.list",
        "builtins.dict",
        "numpy.core.multiarray._reconstruct",
        "numpy._core.multiarray._reconstruct",
        "numpy.core.multiarray.scalar",
        "numpy._core.multiarray.scalar",
        "numpy.core.numeric._frombuffer",
        "numpy._core.numeric._frombuffer",
        "numpy.ndarray",
        "numpy.dtype",
        "numpy.frombuffer",
        "joblib.numpy_pickle.NumpyArrayWrapper",
        "joblib.numpy_pickle.NDArrayWrapper",
        "joblib.numpy_pickle_compat.NDArrayWrapper",
    };
    for (const char* f : {"_rebuild_parameter", "_rebuild_parameter_with_state", "_rebuild_qtensor",
                          "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3",
                          "_rebuild_sparse_tensor", "_rebuild_meta_tensor_no_storage",
                          "_rebuild_wrapper_subclass", "_rebuild_device_tensor_from_numpy",
                          "_rebuild_device_tensor_from_cpu_tensor"}) {
      s.insert(Join("torch._utils", f));
    }
    // dtypes: str(torch.float32) == "torch.float32".
    for (const char* d :
         {"float32", "float", "float64", "double", "float16", "half", "bfloat16", "complex32",
          "chalf", "complex64", "cfloat", "complex128", "cdouble", "uint8", "int8", "int16",
          "short", "int32", "int", "int64", "long", "bool", "qint8", "quint8", "qint32",
          "quint4x2", "quint2x4", "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz",
          "float8_e4m3fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2", "uint16", "uint32", "uint64",
          "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2", "uint1", "uint2", "uint3", "uint4",
          "uint5", "uint6", "uint7", "int1", "int2", "int3", "int4", "int5", "int6", "int7"}) {
      s.insert(Join("torch", d));
    }
    // Legacy storage and tensor classes (torch._storage_classes,
    // torch._tensor_classes), CPU and CUDA.
    for (const char* t : {"Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char",
                          "Byte", "Bool", "ComplexFloat", "ComplexDouble", "QUInt8", "QInt8",
                          "QInt32", "QUInt4x2", "QUInt2x4"}) {
      for (const char* m : {"torch", "torch.cuda"}) {
        s.insert(Join(m, std::string(t) + "Storage"));
        s.insert(Join(m, std::string(t) + "Tensor"));
      }
    }
    std::unordered_set<std::string> keys;
    for (const std::string& full : s) {
      size_t dot = full.rfind('.');
      keys.insert(PairKey(std::string_view(full).substr(0, dot), std::string_view(full).substr(dot + 1)));
    }
    return keys;
  }();
  return kSafe;
}

// Modules whose every global is a code-execution or system-access primitive
// (matched as the module itself or any submodule), including the C
// accelerators that re-export them.
constexpr std::array kCriticalModules = {
    "os", "posix", "nt", "subprocess", "_posixsubprocess", "_winapi",
    "msvcrt", "winreg", "_winreg", "sys", "runpy", "importlib", "importlib_metadata",
    "importlib_resources", "imp", "_imp", "_frozen_importlib", "_frozen_importlib_external",
    "zipimport", "pkgutil", "pkg_resources", "pty", "socket", "_socket", "ssl", "_ssl", "select",
    "selectors", "shutil", "ctypes", "_ctypes", "cffi", "_cffi_backend", "marshal", "types",
    "code", "codeop", "cProfile", "profile", "_lsprof", "pdb", "bdb", "trace", "timeit", "site",
    "sitecustomize", "usercustomize", "webbrowser", "antigravity", "logging.config", "operator",
    "_operator", "functools", "_functools", "pickle", "_pickle", "cPickle", "pickletools",
    "dill", "cloudpickle", "shelve", "dbm", "sqlite3", "_sqlite3", "io", "_io",
    "_pyio", "tempfile", "fileinput", "pathlib", "gzip", "bz2", "lzma", "zipfile",
    "tarfile", "multiprocessing", "_multiprocessing", "concurrent", "asyncio", "signal",
    "_signal", "threading", "_thread", "_xxsubinterpreters", "_interpreters", "gc", "mmap",
    "fcntl", "resource", "platform", "commands", "popen2", "http", "httplib", "urllib",
    "urllib2", "urllib3", "requests", "httpx", "aiohttp", "ftplib", "smtplib", "poplib",
    "imaplib", "nntplib", "telnetlib", "xmlrpc", "xmlrpclib", "socketserver", "SocketServer",
    "wsgiref", "pydoc", "doctest", "idlelib", "distutils", "setuptools", "pip", "ensurepip",
    "venv", "pyximport", "Cython", "yaml", "torch.hub", "torch.jit", "torch.package",
    "torch.utils.cpp_extension", "torch._C._jit", "torch.fx", "torch._dynamo", "torch._inductor",
    "torch.export", "torch._export", "torch.multiprocessing", "torch.distributed.rpc",
    "joblib.externals", "loky", "pexpect", "IPython", "numexpr", "sympy.parsing",
    "numpy.lib.npyio", "numpy.lib.format",
    "numpy.ctypeslib", "numpy.f2py", "numpy.distutils", "numpy.testing", "pandas.io.pickle",
    "pandas.core.computation", "builtins.__import__",
};

// Globals of otherwise reviewable modules that load or evaluate.
constexpr std::array kCriticalPairs = {
    "torch.load", "torch.serialization.load", "torch.serialization._load",
    "torch.serialization._legacy_load", "torch._utils._import_dotted_name", "torch.compile",
    "numpy.load", "numpy.loadtxt", "numpy.genfromtxt", "numpy.fromfile", "numpy.memmap",
    "pandas.read_pickle", "pandas.eval", "joblib.load", "joblib.numpy_pickle.load",
    "codecs.open", "keras.models.load_model", "sympy.sympify", "joblib.Parallel",
    "joblib.parallel.Parallel", "torch.serialization._open_file_like", "torch._C._jit_script_compile",
};

// Builtins that execute, import, reach attributes, touch files or call
// their callable argument.
constexpr std::array kCriticalBuiltins = {
    "eval", "exec", "execfile", "compile", "open", "file", "getattr", "setattr", "delattr",
    "__import__", "breakpoint", "vars", "globals", "locals", "input", "raw_input", "help",
    "exit", "quit", "reload", "apply", "reduce", "type", "map", "filter", "iter", "next",
    "sorted", "min", "max", "copyright", "credits", "license", "memoryview", "object",
    "classmethod", "staticmethod", "property", "super", "__build_class__", "__loader__",
    "__spec__",
};

// A qualname (or submodule) component with one of these names reaches a
// dangerous module or function wherever it is walked from.
constexpr std::array kDangerousComponents = {
    // modules
    "os", "posix", "nt", "sys", "subprocess", "_posixsubprocess", "builtins", "__builtin__",
    "socket", "_socket", "shutil", "ctypes", "_ctypes", "pty", "runpy", "importlib", "marshal",
    "pickle", "_pickle", "cPickle", "dill", "cloudpickle", "commands", "webbrowser", "pdb",
    "timeit", "multiprocessing", "_winapi",
    // functions
    "eval", "exec", "execfile", "compile", "system", "popen", "popen2", "popen3", "popen4",
    "getoutput", "getstatusoutput", "check_output", "check_call", "Popen", "spawnl", "spawnle",
    "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "execl", "execle",
    "execlp", "execlpe", "execv", "execve", "execvp", "execvpe", "fork", "forkpty",
    "posix_spawn", "posix_spawnp", "startfile", "import_module", "_import_dotted_name",
    "getattr", "setattr", "delattr", "breakpoint", "run_path", "run_module", "attrgetter",
    "methodcaller", "load_module", "exec_module", "dlopen", "LoadLibrary", "CDLL", "PyDLL",
    "WinDLL", "cdll", "pydll", "read_pickle", "unsafe_load", "load_model",
};

bool ModuleUnder(std::string_view module, std::string_view prefix) {
  return module == prefix ||
         (module.size() > prefix.size() && module.substr(0, prefix.size()) == prefix &&
          module[prefix.size()] == '.');
}

std::vector<std::string_view> Split(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    parts.push_back(s.substr(start, dot == std::string_view::npos ? std::string_view::npos
                                                                  : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts;
}

bool IsDunder(std::string_view c) {
  return c.size() > 4 && c.substr(0, 2) == "__" && c.substr(c.size() - 2) == "__";
}

template <size_t N>
bool In(const std::array<const char*, N>& table, std::string_view s) {
  return std::any_of(table.begin(), table.end(), [&](const char* t) { return s == t; });
}

// Critical reports why `module`.`qualname` is a code-execution global, or
// "" if it is not one.
std::string CriticalReason(std::string_view module, std::string_view qualname) {
  for (const char* m : kCriticalModules) {
    if (ModuleUnder(module, m)) return "module \"" + std::string(m) + "\" can run code or reach the system";
  }
  std::string full = Join(module, qualname);
  for (const char* p : kCriticalPairs) {
    if (full == p) return "loads or evaluates untrusted data";
  }
  // torch._C's TorchScript compiler and pass entry points (_jit_*).
  if (module == "torch._C" && qualname.substr(0, 4) == "_jit") {
    return "TorchScript compiler internals (torch._C._jit_*) run code";
  }
  std::vector<std::string_view> parts = Split(qualname);
  if ((module == "builtins" || module == "__builtin__" || module == "__builtins__") &&
      In(kCriticalBuiltins, parts[0])) {
    return "builtin \"" + std::string(parts[0]) + "\" executes, imports or reaches attributes";
  }
  for (std::string_view c : parts) {
    if (IsDunder(c)) return "attribute walk through \"" + std::string(c) + "\"";
    if (In(kDangerousComponents, c)) return "name component \"" + std::string(c) + "\" is a code-execution primitive";
  }
  std::vector<std::string_view> mod_parts = Split(module);
  for (size_t i = 1; i < mod_parts.size(); ++i) {
    if (IsDunder(mod_parts[i]) || In(kDangerousComponents, mod_parts[i])) {
      return "submodule \"" + std::string(mod_parts[i]) + "\" is a code-execution primitive";
    }
  }
  return "";
}

}  // namespace

std::string_view GlobalClassName(GlobalClass c) {
  switch (c) {
    case GlobalClass::kSafe: return "safe";
    case GlobalClass::kUnknown: return "unknown";
    case GlobalClass::kCritical: return "critical";
  }
  return "unknown";
}

GlobalClass ClassifyGlobal(std::string_view module, std::string_view qualname, std::string* reason) {
  std::string why;
  GlobalClass c = GlobalClass::kUnknown;
  if (SafeGlobals().count(PairKey(module, qualname)) != 0) {
    c = GlobalClass::kSafe;
  } else if (why = CriticalReason(module, qualname); !why.empty()) {
    c = GlobalClass::kCritical;
  } else {
    why = "unknown import; needs review";
  }
  if (reason != nullptr) *reason = why;
  return c;
}

namespace pickle_internal {

bool IsNestingLoader(std::string_view module, std::string_view qualname) {
  return module == "torch.storage" && qualname == "_load_from_bytes";
}

ValueType ValueTypeOf(std::string_view module, std::string_view qualname) {
  if (module == "_codecs" && qualname == "encode") return ValueType::kLatin1;
  if (module == "collections" && qualname == "defaultdict") return ValueType::kDefaultDict;
  // What CPython writes for each (protocols 0-5): REDUCE of the type with
  // literal arguments: datetime/date/time (bytes state[, tzinfo]),
  // timedelta (ints), timezone (timedelta[, name]), Decimal (str),
  // Fraction (ints or str), complex (floats), range/slice (ints/None),
  // set/frozenset (a list), bytearray/bytes (bytes), Counter (a dict),
  // deque (a list, maxlen).
  static constexpr std::pair<const char*, const char*> kLiteral[] = {
      {"datetime", "datetime"}, {"datetime", "date"}, {"datetime", "time"},
      {"datetime", "timedelta"}, {"datetime", "timezone"}, {"decimal", "Decimal"},
      {"fractions", "Fraction"}, {"builtins", "complex"}, {"builtins", "range"},
      {"builtins", "slice"}, {"builtins", "set"}, {"builtins", "frozenset"},
      {"builtins", "bytearray"}, {"builtins", "bytes"}, {"collections", "Counter"},
      {"collections", "deque"},
  };
  for (const auto& [m, q] : kLiteral) {
    if (module == m && qualname == q) return ValueType::kLiteralArgs;
  }
  return ValueType::kNone;
}

bool IsTorchScriptHelper(std::string_view module, std::string_view qualname) {
  // torch/jit/_pickle.py; unpickler.cpp readGlobal handles exactly these
  // (build_tensor_from_id only with a tensor table: constants.pkl).
  static constexpr const char* kJitPickle[] = {
      "build_intlist", "build_tensorlist", "build_doublelist", "build_boollist",
      "build_tensor_from_id", "restore_type_tag"};
  if (module != "torch.jit._pickle") return false;
  return std::any_of(std::begin(kJitPickle), std::end(kJitPickle),
                     [&](const char* n) { return qualname == n; });
}

bool IsCallableArgRebuild(std::string_view module, std::string_view qualname) {
  return (module == "torch._tensor" || module == "torch.tensor") &&
         qualname == "_rebuild_from_type_v2";
}

// Lib/_compat_pickle.py (CPython 3.11): IMPORT_MAPPING and NAME_MAPPING,
// including the later update() calls and the exception loops.
bool MapPy2Name(std::string* module, std::string* qualname) {
  static const std::unordered_map<std::string, std::string> kImport = {
      {"__builtin__", "builtins"}, {"copy_reg", "copyreg"}, {"Queue", "queue"},
      {"SocketServer", "socketserver"}, {"ConfigParser", "configparser"}, {"repr", "reprlib"},
      {"tkFileDialog", "tkinter.filedialog"}, {"tkSimpleDialog", "tkinter.simpledialog"},
      {"tkColorChooser", "tkinter.colorchooser"}, {"tkCommonDialog", "tkinter.commondialog"},
      {"Dialog", "tkinter.dialog"}, {"Tkdnd", "tkinter.dnd"}, {"tkFont", "tkinter.font"},
      {"tkMessageBox", "tkinter.messagebox"}, {"ScrolledText", "tkinter.scrolledtext"},
      {"Tkconstants", "tkinter.constants"}, {"Tix", "tkinter.tix"}, {"ttk", "tkinter.ttk"},
      {"Tkinter", "tkinter"}, {"markupbase", "_markupbase"}, {"_winreg", "winreg"},
      {"thread", "_thread"}, {"dummy_thread", "_dummy_thread"}, {"dbhash", "dbm.bsd"},
      {"dumbdbm", "dbm.dumb"}, {"dbm", "dbm.ndbm"}, {"gdbm", "dbm.gnu"},
      {"xmlrpclib", "xmlrpc.client"}, {"SimpleXMLRPCServer", "xmlrpc.server"},
      {"httplib", "http.client"}, {"htmlentitydefs", "html.entities"},
      {"HTMLParser", "html.parser"}, {"Cookie", "http.cookies"}, {"cookielib", "http.cookiejar"},
      {"BaseHTTPServer", "http.server"}, {"test.test_support", "test.support"},
      {"commands", "subprocess"}, {"urlparse", "urllib.parse"},
      {"robotparser", "urllib.robotparser"}, {"urllib2", "urllib.request"}, {"anydbm", "dbm"},
      {"_abcoll", "collections.abc"}, {"cPickle", "pickle"},
      {"_elementtree", "xml.etree.ElementTree"}, {"FileDialog", "tkinter.filedialog"},
      {"SimpleDialog", "tkinter.simpledialog"}, {"DocXMLRPCServer", "xmlrpc.server"},
      {"SimpleHTTPServer", "http.server"}, {"CGIHTTPServer", "http.server"},
      {"UserDict", "collections"}, {"UserList", "collections"}, {"UserString", "collections"},
      {"whichdb", "dbm"}, {"StringIO", "io"}, {"cStringIO", "io"},
  };
  static const std::unordered_map<std::string, std::pair<std::string, std::string>> kName = [] {
    std::unordered_map<std::string, std::pair<std::string, std::string>> m = {
        {"__builtin__\nxrange", {"builtins", "range"}},
        {"__builtin__\nreduce", {"functools", "reduce"}},
        {"__builtin__\nintern", {"sys", "intern"}},
        {"__builtin__\nunichr", {"builtins", "chr"}},
        {"__builtin__\nunicode", {"builtins", "str"}},
        {"__builtin__\nlong", {"builtins", "int"}},
        {"itertools\nizip", {"builtins", "zip"}},
        {"itertools\nimap", {"builtins", "map"}},
        {"itertools\nifilter", {"builtins", "filter"}},
        {"itertools\nifilterfalse", {"itertools", "filterfalse"}},
        {"itertools\nizip_longest", {"itertools", "zip_longest"}},
        {"UserDict\nIterableUserDict", {"collections", "UserDict"}},
        {"UserList\nUserList", {"collections", "UserList"}},
        {"UserString\nUserString", {"collections", "UserString"}},
        {"whichdb\nwhichdb", {"dbm", "whichdb"}},
        {"_socket\nfromfd", {"socket", "fromfd"}},
        {"_multiprocessing\nConnection", {"multiprocessing.connection", "Connection"}},
        {"multiprocessing.process\nProcess", {"multiprocessing.context", "Process"}},
        {"multiprocessing.forking\nPopen", {"multiprocessing.popen_fork", "Popen"}},
        {"urllib\nContentTooShortError", {"urllib.error", "ContentTooShortError"}},
        {"urllib\ngetproxies", {"urllib.request", "getproxies"}},
        {"urllib\npathname2url", {"urllib.request", "pathname2url"}},
        {"urllib\nquote_plus", {"urllib.parse", "quote_plus"}},
        {"urllib\nquote", {"urllib.parse", "quote"}},
        {"urllib\nunquote_plus", {"urllib.parse", "unquote_plus"}},
        {"urllib\nunquote", {"urllib.parse", "unquote"}},
        {"urllib\nurl2pathname", {"urllib.request", "url2pathname"}},
        {"urllib\nurlcleanup", {"urllib.request", "urlcleanup"}},
        {"urllib\nurlencode", {"urllib.parse", "urlencode"}},
        {"urllib\nurlopen", {"urllib.request", "urlopen"}},
        {"urllib\nurlretrieve", {"urllib.request", "urlretrieve"}},
        {"urllib2\nHTTPError", {"urllib.error", "HTTPError"}},
        {"urllib2\nURLError", {"urllib.error", "URLError"}},
        {"__builtin__\nbasestring", {"builtins", "str"}},
        {"exceptions\nStandardError", {"builtins", "Exception"}},
        {"UserDict\nUserDict", {"collections", "UserDict"}},
        {"socket\n_socketobject", {"socket", "SocketType"}},
    };
    for (const char* e :
         {"ArithmeticError", "AssertionError", "AttributeError", "BaseException", "BufferError",
          "BytesWarning", "DeprecationWarning", "EOFError", "EnvironmentError", "Exception",
          "FloatingPointError", "FutureWarning", "GeneratorExit", "IOError", "ImportError",
          "ImportWarning", "IndentationError", "IndexError", "KeyError", "KeyboardInterrupt",
          "LookupError", "MemoryError", "NameError", "NotImplementedError", "OSError",
          "OverflowError", "PendingDeprecationWarning", "ReferenceError", "RuntimeError",
          "RuntimeWarning", "StopIteration", "SyntaxError", "SyntaxWarning", "SystemError",
          "SystemExit", "TabError", "TypeError", "UnboundLocalError", "UnicodeDecodeError",
          "UnicodeEncodeError", "UnicodeError", "UnicodeTranslateError", "UnicodeWarning",
          "UserWarning", "ValueError", "Warning", "ZeroDivisionError"}) {
      m[std::string("exceptions\n") + e] = {"builtins", e};
    }
    for (const char* e : {"AuthenticationError", "BufferTooShort", "ProcessError", "TimeoutError"}) {
      m[std::string("multiprocessing\n") + e] = {"multiprocessing.context", e};
    }
    return m;
  }();
  auto n = kName.find(*module + "\n" + *qualname);
  if (n != kName.end()) {
    *module = n->second.first;
    *qualname = n->second.second;
    return true;
  }
  auto i = kImport.find(*module);
  if (i != kImport.end()) {
    *module = i->second;
    return true;
  }
  return false;
}

}  // namespace pickle_internal
}  // namespace modelgate::scanner
