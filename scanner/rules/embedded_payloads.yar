// modelgate default rules: other formats hidden where they do not belong.
//
// A pickle, an executable or an archive inside a safetensors header, its
// metadata or an archive member that is not itself a pickle/archive is a
// smuggled payload (a second loader sees it). Pickle opcode patterns are
// also matched inside pickle streams as a second line behind the pickle
// machine: GLOBAL/INST text and STACK_GLOBAL string pairs naming code
// execution. Byte patterns carry enough fixed bytes (magic plus the
// fields every real instance has) to stay silent on arbitrary binary data.
// Scopes: see shell_commands.yar.

rule pickle_in_header_or_member
{
  meta:
    description = "a pickle stream (protocol 2-5 header with a real first opcode) hidden inside a header, metadata or a non-pickle member"
    severity = "high"
  strings:
    // PROTO 4/5, then FRAME with an 8-byte length below 64 KiB (CPython's
    // frame target), then a real first opcode.
    $p4 = { 80 04 95 ?? ?? 00 00 00 00 00 00 (8C | 7D 94 | 5D 94 | 28 | 63 | 93 | 4B | 4A | 8A | 88 | 89 | 4E | 29) }
    $p5 = { 80 05 95 ?? ?? 00 00 00 00 00 00 (8C | 7D 94 | 5D 94 | 28 | 63 | 93 | 4B | 4A | 8A | 88 | 89 | 4E | 29) }
    // PROTO 2/3, then GLOBAL "module\nname\n".
    $p2_global = /\x80\x02c[A-Za-z_][A-Za-z0-9_.]{0,63}\n[A-Za-z_][A-Za-z0-9_.]{0,63}\n/
    $p3_global = /\x80\x03c[A-Za-z_][A-Za-z0-9_.]{0,63}\n[A-Za-z_][A-Za-z0-9_.]{0,63}\n/
    // PROTO 2/3, then EMPTY_DICT/EMPTY_LIST and BINPUT 0 (what CPython
    // writes first for a dict or list).
    $p2_start = { 80 02 (7D | 5D) 71 00 }
    $p3_start = { 80 03 (7D | 5D) 71 00 }
  condition:
    (mg_scope == "header" or mg_scope == "metadata" or mg_scope == "member") and any of them
}

rule pickle_code_execution_global
{
  meta:
    description = "pickle opcodes importing a code-execution global (os/posix/nt system, subprocess, builtins eval/exec/getattr/__import__, runpy, pty, socket, webbrowser)"
    severity = "critical"
  strings:
    // Protocol 0-2 GLOBAL ('c') and INST ('i'): "module\nname\n".
    $text_os = /[ci](os|posix|nt)\n(system|popen|execv|execve|execvp|execl|execlp|spawnl|spawnv|spawnve|startfile|posix_spawn|fork)\n/
    $text_subprocess = /[ci](subprocess|_posixsubprocess)\n(Popen|call|run|check_output|check_call|getoutput|getstatusoutput|fork_exec)\n/
    $text_builtins = /[ci](builtins|__builtin__)\n(eval|exec|execfile|compile|getattr|__import__|open|breakpoint|input|globals|vars)\n/
    $text_other = /[ci](runpy\n(_run_code|run_path|run_module)|pty\nspawn|socket\n(socket|create_connection)|webbrowser\n(open|open_new)|commands\n(getoutput|getstatusoutput)|importlib\nimport_module|code\n(interact|InteractiveInterpreter)|ctypes\n(CDLL|PyDLL)|pdb\n(run|set_trace)|timeit\n(timeit|repeat))\n/
    // Protocol 4/5 STACK_GLOBAL fed by SHORT_BINUNICODE / BINUNICODE
    // strings, optionally memoized in between.
    $stack_os = /(\x8c\x02|\x8c\x05|X\x02\x00\x00\x00|X\x05\x00\x00\x00)(os|nt|posix)(\x94|q.|r....)?(\x8c.|X....)(system|popen|execv|execve|execvp|spawnl|spawnv|startfile|posix_spawn)/s
    $stack_subprocess = /(\x8c\x0a|X\x0a\x00\x00\x00)subprocess(\x94|q.|r....)?(\x8c.|X....)(Popen|call|run|check_output|check_call|getoutput)/s
    $stack_builtins = /(\x8c\x08|\x8c\x0b|X\x08\x00\x00\x00|X\x0b\x00\x00\x00)(builtins|__builtin__)(\x94|q.|r....)?(\x8c.|X....)(eval|exec|compile|getattr|__import__|open|breakpoint)/s
    $stack_other = /(\x8c.|X....)(runpy|pty|socket|webbrowser)(\x94|q.|r....)?(\x8c.|X....)(_run_code|run_path|run_module|spawn|create_connection|open_new|open)/s
  condition:
    mg_scope != "data" and any of them
}

rule pickle_exec_of_decoded_blob
{
  meta:
    description = "pickle that execs/evals the output of zlib/base64/marshal/codecs decoding (the injected-payload pattern)"
    severity = "critical"
  strings:
    $text = /[ci](builtins|__builtin__)\n(exec|eval)\n(\(|\)|\x94|q.|\x8c)?.{0,8}c(zlib|base64|marshal|codecs|binascii|bz2|lzma)\n(decompress|b64decode|b32decode|b16decode|a85decode|loads|decode|unhexlify|a2b_base64)\n/s
    $stack = /(\x8c.|X....)(builtins|__builtin__).{0,8}(\x8c.|X....)(exec|eval).{0,16}(\x8c.|X....)(zlib|base64|marshal|codecs|binascii|bz2|lzma).{0,8}(\x8c.|X....)(decompress|b64decode|loads|decode|unhexlify)/s
  condition:
    mg_scope != "data" and any of them
}

rule base64_encoded_pickle
{
  meta:
    description = "base64 text that starts like a pickle stream (gASV..., gAJj..., gANj...): a pickle waiting for pickle.loads(b64decode(...))"
    severity = "high"
  strings:
    // Base64 of a pickle starts with the PROTO byte: at the start of the
    // buffer or of a token, never in the middle of a longer base64 run.
    $at_token = /[^A-Za-z0-9+\/](gASV|gAWV|gAJj|gAJ9|gAJd|gAIo|gANj|gAN9|gANd|gAMo|gARj|gAR9|gAVj|gAV9)[A-Za-z0-9+\/]{16}/
    $at_start = /(gASV|gAWV|gAJj|gAJ9|gAJd|gAIo|gANj|gAN9|gANd|gAMo|gARj|gAR9|gAVj|gAV9)[A-Za-z0-9+\/]{16}/
  condition:
    mg_scope != "data" and ($at_token or $at_start at 0)
}

rule embedded_elf_executable
{
  meta:
    description = "an ELF executable or shared object (magic, class, byte order, version, and a real object type)"
    severity = "high"
  strings:
    $elf = { 7F 45 4C 46 (01 | 02) (01 | 02) 01 [9] ((01 | 02 | 03 | 04) 00 | 00 (01 | 02 | 03 | 04)) }
  condition:
    $elf
}

rule embedded_pe_executable
{
  meta:
    description = "a Windows PE executable (MZ header with its DOS stub, or the DOS-mode message)"
    severity = "high"
  strings:
    $mz = { 4D 5A 90 00 03 00 00 00 04 00 00 00 FF FF 00 00 }
    $stub = "This program cannot be run in DOS mode"
  condition:
    any of them
}

rule embedded_macho_executable
{
  meta:
    description = "a Mach-O executable (thin 32/64-bit little-endian for x86/ARM, or a universal binary)"
    severity = "high"
  strings:
    $thin = { (CE | CF) FA ED FE (07 | 0C) 00 00 (00 | 01) [4] (01 | 02 | 06 | 08) 00 00 00 }
    $fat = { CA FE BA BE 00 00 00 (01 | 02 | 03 | 04) (00 | 01) 00 00 (07 | 0C) }
  condition:
    any of them
}

rule embedded_zip_archive
{
  meta:
    description = "a zip local file header hidden inside a header, metadata or a non-archive member (a second archive a zip reader may open)"
    severity = "high"
  strings:
    $local = { 50 4B 03 04 (0A | 14 | 2D | 3F) 00 }
  condition:
    (mg_scope == "header" or mg_scope == "metadata" or mg_scope == "member") and $local
}

rule base64_encoded_executable_or_archive
{
  meta:
    description = "base64 text that decodes to an ELF, PE or Mach-O executable or a zip archive"
    severity = "high"
  strings:
    $elf = "\x7fELF\x02\x01\x01" base64
    $elf32 = "\x7fELF\x01\x01\x01" base64
    $pe = "MZ\x90\x00\x03\x00\x00\x00" base64
    $macho64 = "\xcf\xfa\xed\xfe\x07\x00\x00\x01" base64
    $macho_arm = "\xcf\xfa\xed\xfe\x0c\x00\x00\x01" base64
    $zip = "PK\x03\x04\x14\x00" base64
  condition:
    mg_scope != "data" and any of them
}

rule script_in_header
{
  meta:
    description = "a script (shebang line) inside a header, metadata or pickle string"
    severity = "high"
  strings:
    $shebang = /#!\s?\/(usr\/)?(local\/)?bin\/(env\s+)?(ba|z|da|k)?sh|#!\s?\/(usr\/)?(local\/)?bin\/(env\s+)?(python|perl|ruby|node)[0-9.]*/
  condition:
    (mg_scope == "header" or mg_scope == "metadata" or mg_scope == "pickle") and $shebang
}
