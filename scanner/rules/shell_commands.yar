// modelgate default rules: shell commands and network indicators.
//
// These rules run on the bytes of a model file that are never tensor data:
// safetensors headers (mg_scope "header"), decoded __metadata__ entries
// ("metadata"), pickle streams ("pickle") and non-tensor archive members
// ("member"); tensor data ("data") only when the operator asks for it.
// A weight file has no reason to carry a shell command. Rules whose strings
// are common in ordinary text (a URL, "/bin/sh") are limited to the scopes
// where no ordinary text lives.
//
// meta severity: critical | high | medium | low | info (default high).

rule shell_download_and_execute
{
  meta:
    description = "downloads something and runs it (curl/wget piped into a shell or interpreter, or fetched then made executable)"
    severity = "critical"
  strings:
    $pipe = /\b(curl|wget|fetch)\s[^\n|;]{0,256}\|\s*(sudo\s+)?((ba|z|da|k)?sh|python[0-9.]*|perl|ruby|node)\b/
    $subst = /\b(ba|z|da|k)?sh\s+-c\s+["']?\$\(\s*(curl|wget)\s/
    $chmod = /\b(curl|wget)\s[^\n]{0,256}(;|&&)\s*chmod\s+(\+x|[0-7]?[0-7][0-7][0-7])\s/
    $iwr = /\b(iwr|irm|Invoke-WebRequest|Invoke-RestMethod)\b[^\n]{0,256}\|\s*(iex|Invoke-Expression)\b/ nocase
  condition:
    any of them
}

rule shell_command_invocation
{
  meta:
    description = "invokes a command shell (sh -c, cmd /c, PowerShell with an encoded or downloaded command)"
    severity = "high"
  strings:
    $sh_c = /\b(ba|z|da|k)?sh\s+-c\s/
    $cmd_c = /\bcmd(\.exe)?\s+\/[ck]\s/ nocase
    $ps = /\bpowershell(\.exe)?\b[^\n]{0,128}\s-(e|ec|enc|encodedcommand|nop|noprofile|w\s+hidden|windowstyle\s+hidden)\b/ nocase
    $ps_iex = /\b(iex|Invoke-Expression)\s*\(\s*(New-Object|\[System\.Text\.Encoding\]|\(New-Object)/ nocase
    $ps_dl = /\.Download(String|File|Data)\s*\(/ nocase
    $bin_sh = /\/bin\/(ba|z|da|k)?sh\b/
  condition:
    $sh_c or $cmd_c or $ps or $ps_iex or $ps_dl or
    ($bin_sh and (mg_scope == "header" or mg_scope == "metadata" or mg_scope == "pickle"))
}

rule reverse_shell
{
  meta:
    description = "reverse-shell idiom (/dev/tcp, nc -e, bash -i >&, mkfifo pipe, socat exec, pty.spawn)"
    severity = "critical"
  strings:
    $dev_tcp = /\/dev\/(tcp|udp)\/[A-Za-z0-9.\-]{1,253}\/[0-9]{1,5}/
    $nc_e = /\b(nc|ncat|netcat)(\.exe)?\s+(-[A-Za-z]+\s+)*-[A-Za-z]*[ec]\s+[^\s]{1,64}/
    $bash_i = /\b(ba|z)?sh\s+-i\s*(>&|&>|>\s*&|2>&1)/
    $mkfifo = /\bmkfifo\s+\/tmp\/[^\s;]{1,64}\s*;/
    $socat = /\bsocat\b[^\n]{0,128}\bexec:/ nocase
    $pty = /\bpty\.spawn\s*\(/
    $dup2 = /\bos\.dup2\s*\(\s*[^,\n]{1,64},\s*[012]\s*\)/
  condition:
    any of them
}

rule destructive_command
{
  meta:
    description = "destructive command (rm -rf on a root or home path, mkfs, dd onto a device, shutil.rmtree)"
    severity = "critical"
  strings:
    $rm = /\brm\s+-[A-Za-z]*[rR][A-Za-z]*f?[A-Za-z]*\s+(--no-preserve-root\s+)?(\/|~|\$HOME|\/\*|\/home|\/root|\/etc|\/usr)(\s|$|\/?\*|;|")/
    $mkfs = /\bmkfs(\.[a-z0-9]+)?\s+\/dev\//
    $dd = /\bdd\s+if=\/dev\/(zero|urandom|random)\s+of=\/dev\//
    $rmtree = /\bshutil\.rmtree\s*\(/
  condition:
    (mg_scope == "header" or mg_scope == "metadata" or mg_scope == "pickle") and any of them
}

rule persistence_or_credential_access
{
  meta:
    description = "touches persistence points or credentials (crontab, shell rc files, authorized_keys, /etc/shadow, cloud or Hugging Face tokens)"
    severity = "high"
  strings:
    $cron = /\bcrontab\s+(-[lru]\b|-\s)|\/etc\/cron\.d\/|\/var\/spool\/cron\//
    $rc = /(~|\$HOME|\/home\/[^\/\s"]{1,64}|\/root)\/\.(bashrc|bash_profile|zshrc|profile)\b/
    $keys = /\.ssh\/(authorized_keys|id_rsa|id_ed25519|id_ecdsa)\b/
    $shadow = "/etc/shadow"
    $passwd = "/etc/passwd"
    $aws = /\.aws\/credentials\b|AWS_SECRET_ACCESS_KEY/
    $hf = /\b(HF_TOKEN|HUGGING_FACE_HUB_TOKEN|HUGGINGFACE_TOKEN)\b/
    $environ = /\bos\.environ\b|\bos\.getenv\s*\(/
  condition:
    (mg_scope == "header" or mg_scope == "metadata" or mg_scope == "pickle") and any of them
}

rule cryptominer
{
  meta:
    description = "cryptocurrency-miner indicator (stratum mining URL, xmrig)"
    severity = "critical"
  strings:
    $stratum = /stratum\+(tcp|ssl|tls):\/\//  nocase
    $xmrig = /\bxmrig\b/ nocase
    $nicehash = /\.nicehash\.com\b/ nocase
  condition:
    any of them
}

rule url_to_raw_ip_or_exfil_host
{
  meta:
    description = "URL to a bare IP address, a paste or file-drop site, a tunnel, a webhook or a bot API (where payloads are fetched from or data is sent to)"
    severity = "high"
  strings:
    $ip = /\b(https?|ftp|tcp|udp):\/\/[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\b/ nocase
    $paste = /\b(pastebin\.com\/raw|paste\.ee\/r|hastebin\.com\/raw|ghostbin\.|rentry\.co\/[^\s"]{1,64}\/raw)/ nocase
    $drop = /\b(transfer\.sh|file\.io|0x0\.st|temp\.sh|bashupload\.com)\b/ nocase
    $tunnel = /\b[a-z0-9\-]{1,63}\.(ngrok\.io|ngrok-free\.app|ngrok\.app|trycloudflare\.com|serveo\.net|loca\.lt)\b/ nocase
    $hook = /\b(discord(app)?\.com\/api\/webhooks\/|api\.telegram\.org\/bot|webhook\.site\/|hooks\.slack\.com\/services\/)/ nocase
    $oast = /\b[a-z0-9\-.]{1,200}\.(oast\.(fun|live|me|online|pro|site)|interact\.sh|burpcollaborator\.net|requestbin\.net|pipedream\.net)\b/ nocase
  condition:
    ($ip and (mg_scope == "header" or mg_scope == "metadata" or mg_scope == "pickle")) or
    $paste or $drop or $tunnel or $hook or $oast
}

rule url_in_metadata
{
  meta:
    description = "URL in the safetensors header or metadata (shown for review; model cards and licenses link here too)"
    severity = "low"
  strings:
    $url = /\b(https?|ftp|wss?):\/\/[A-Za-z0-9\-.]{1,253}/ nocase
  condition:
    (mg_scope == "header" or mg_scope == "metadata") and $url
}
