// modelgate default rules: Python payload text.
//
// A malicious pickle usually carries its payload as a string handed to
// exec/eval/os.system, and a safetensors header has no reason to hold Python
// at all. The pickle machine judges what a stream imports and calls; these
// rules look at the text it would hand over, and at the same text hidden in
// headers, metadata and archive members. Calls are matched with their
// opening parenthesis (and word boundaries) so that prose naming a function
// does not match. Scopes: see shell_commands.yar.

rule python_os_command
{
  meta:
    description = "Python code that runs an OS command (os.system/popen/exec*/spawn*, subprocess, pty, commands)"
    severity = "critical"
  strings:
    $os = /\b(os|posix|nt)\.(system|popen|popen[234]|exec[lv]p?e?|spawn[lv]p?e?|posix_spawnp?|startfile)\s*\(/
    $subprocess = /\bsubprocess\.(Popen|call|run|check_output|check_call|getoutput|getstatusoutput)\s*\(/
    $commands = /\bcommands\.(getoutput|getstatusoutput)\s*\(/
    $pty = /\bpty\.spawn\s*\(/
  condition:
    any of them
}

rule python_exec_eval
{
  meta:
    description = "Python code that evaluates a string (exec/eval/compile/execfile)"
    severity = "high"
  strings:
    $exec = /\b(exec|eval|execfile)\s*\(\s*[^)\s]/
    $compile = /\bcompile\s*\([^)\n]{1,256},\s*['"](exec|eval|single)['"]/
  condition:
    (mg_scope == "header" or mg_scope == "metadata" or mg_scope == "pickle" or mg_scope == "data")
    and any of them
}

rule python_obfuscated_exec
{
  meta:
    description = "Python code that decodes and then runs a hidden payload (exec/eval of base64/zlib/marshal/hex/rot13 output, code objects)"
    severity = "critical"
  strings:
    $exec_decode = /\b(exec|eval)\s*\(\s*(__import__\s*\(\s*['"](base64|zlib|marshal|codecs|binascii|bz2|lzma|gzip)['"]\s*\)|base64|zlib|marshal|codecs|binascii|bz2|lzma|gzip|bytes\.fromhex|bytearray\.fromhex)[.\w]*\s*\(/
    $marshal = /\bmarshal\.loads\s*\(/
    $code_type = /\btypes\.(CodeType|FunctionType)\s*\(/
    $rot13 = /\bcodecs\.decode\s*\([^)\n]{1,4096},\s*['"]rot[_-]?13['"]\s*\)/
  condition:
    any of them
}

rule python_dynamic_import_or_dunder
{
  meta:
    description = "Python introspection used to reach code execution (__import__, __reduce__, __builtins__, __subclasses__, __globals__, importlib)"
    severity = "high"
  strings:
    $import = /\b__import__\s*\(/
    $reduce = /\b__reduce(_ex)?__\b/
    $builtins = /\b__builtins__\b/
    $subclasses = /\b__subclasses__\s*\(\s*\)/
    $globals = /\.__globals__\b/
    $importlib = /\bimportlib\.(import_module|__import__|util\.spec_from_file_location)\s*\(/
    $getattr_import = /\bgetattr\s*\(\s*__import__\s*\(/
  condition:
    any of them
}

rule python_network_code
{
  meta:
    description = "Python code that opens a network connection or fetches a URL (socket, urllib, requests, http.client, webbrowser)"
    severity = "critical"
  strings:
    $socket = /\bsocket\.(socket|create_connection|fromfd)\s*\(/
    $urllib = /\burllib(2|\.request)?\.(urlopen|urlretrieve|Request)\s*\(/
    $requests = /\brequests\.(get|post|put|request|Session)\s*\(/
    $http = /\bhttp\.client\.HTTPS?Connection\s*\(/
    $webbrowser = /\bwebbrowser\.(open|open_new|open_new_tab)\s*\(/
  condition:
    any of them
}

rule python_native_code
{
  meta:
    description = "Python code that loads native code or patches memory (ctypes CDLL/cdll/windll, mmap of executable pages)"
    severity = "critical"
  strings:
    $ctypes = /\bctypes\.(CDLL|cdll\.LoadLibrary|WinDLL|windll|PyDLL|pythonapi|memmove|cast)\b/
    $mprotect = /\b(mprotect|VirtualAlloc|VirtualProtect)\s*\(/
    $prot_exec = /\bmmap\.PROT_EXEC\b|\bPAGE_EXECUTE_READWRITE\b/
  condition:
    any of them
}

rule python_import_sensitive_module
{
  meta:
    description = "Python import statement for a module used by payloads (os, subprocess, socket, pty, ctypes, ...) where no code belongs"
    severity = "high"
  strings:
    $import = /\bimport\s+(os|subprocess|socket|pty|ctypes|shutil|marshal|urllib|urllib2|urllib\.request|requests|webbrowser|base64|zlib|sys|posix|nt|runpy|importlib|pickle|dill)\b/
    $from = /\bfrom\s+(os|subprocess|socket|pty|ctypes|shutil|marshal|urllib|urllib\.request|requests|base64|zlib|sys|posix|nt|runpy|importlib)\s+import\b/
  condition:
    (mg_scope == "header" or mg_scope == "metadata" or mg_scope == "pickle") and any of them
}

rule base64_encoded_payload
{
  meta:
    description = "base64 text that decodes to a Python or shell payload (import os/subprocess/socket, os.system, exec, /bin/sh, /dev/tcp, PowerShell download)"
    severity = "high"
  strings:
    $py1 = "import os" base64
    $py2 = "import subprocess" base64
    $py3 = "import socket" base64
    $py4 = "import pty" base64
    $py5 = "os.system(" base64
    $py6 = "subprocess.Popen(" base64
    $py7 = "subprocess.run(" base64
    $py8 = "__import__(" base64
    $py9 = "exec(" base64
    $py10 = "eval(" base64
    $py11 = "socket.socket(" base64
    $py12 = "pty.spawn(" base64
    $sh1 = "/bin/sh" base64
    $sh2 = "/bin/bash" base64
    $sh3 = "/dev/tcp/" base64
    $sh4 = "curl http" base64
    $sh5 = "wget http" base64
    $ps1 = "IEX" base64wide
    $ps2 = "Invoke-Expression" base64wide
    $ps3 = "DownloadString" base64wide
    $ps4 = "Net.WebClient" base64wide
  condition:
    any of them
}
