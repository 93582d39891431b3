"""What the `modelgate serve` tests share (serve_load_test.py,
serve_fault_test.py): a server run as a subprocess, HTTP and raw-socket
clients, policies, and the files posted. Standard library only.

    from serve_support import Server, post, request, policy
    with Server(MG, policy(d), spool) as s:      # started, /healthz answered
        status, headers, body = post(s.port, "/v1/scan?name=a.pkl", data)
    # leaving the block sends SIGTERM and asserts exit 0 and a "stopped" line

Server.start reads the port from the first stderr line
({"event":"listening","port":N}), collects every later stderr line (the
access log) in Server.events, and can report the server's fd count and RSS
from /proc. Every wait here is bounded: a server that hangs fails the test.
"""
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.parse

START_TIMEOUT = 15.0   # seconds until the listening line and /healthz
STOP_TIMEOUT = 30.0    # SIGTERM to exit (drains in-flight requests)
SEND_CHUNK = 1 << 20


def policy(d, name="policy.yaml", text="apiVersion: modelgate/v1\nkind: Policy\n"):
    """Writes a modelgate/v1 policy into d; returns its path. The default is
    the smallest policy: it judges as `modelgate scan` without one."""
    path = os.path.join(d, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


class Server:
    """`modelgate serve --policy P --listen 127.0.0.1:0 --spool SPOOL EXTRA...`."""

    def __init__(self, mg, policy_path, spool, *extra):
        self.argv = [mg, "serve", "--policy", policy_path, "--listen", "127.0.0.1:0",
                     "--spool", spool, *extra]
        self.spool = spool
        self.proc = None
        self.port = None
        self.listening = None
        self.events = []        # every JSON stderr line after "listening", parsed
        self.other_stderr = []  # stderr lines that are not JSON objects
        self._lock = threading.Lock()
        self._reader = None

    # ---- lifecycle ----------------------------------------------------------
    def start(self):
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        first = threading.Event()

        def read():
            for raw in self.proc.stderr:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                try:
                    doc = json.loads(line)
                except ValueError:
                    doc = None
                with self._lock:
                    if not isinstance(doc, dict):
                        self.other_stderr.append(line)
                    elif self.listening is None and doc.get("event") == "listening":
                        self.listening = doc
                        first.set()
                    else:
                        self.events.append(doc)
            first.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not first.wait(START_TIMEOUT) or self.listening is None:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.argv}: no listening line within {START_TIMEOUT} s "
                                 f"(exit {self.proc.returncode}); stderr: {self.other_stderr[-10:]}")
        self.port = self.listening.get("port")
        assert isinstance(self.port, int) and 0 < self.port < 65536, f"listening line {self.listening}"
        assert self.listening.get("address") == "127.0.0.1", f"listening line {self.listening}"
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                status, _, body = request(self.port, "GET", "/healthz", timeout=2)
                if status == 200:
                    assert json.loads(body) == {"status": "ok"}, f"/healthz body {body!r}"
                    return self
            except (OSError, http.client.HTTPException):
                pass
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"/healthz not 200 within {START_TIMEOUT} s")
            time.sleep(0.05)

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM, then asserts exit 0 within timeout and a "stopped" line."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"no exit within {timeout} s of SIGTERM")
        self._reader.join(5)
        assert rc == 0, f"exit {rc} after SIGTERM; stderr: {self.other_stderr[-10:]}"
        stopped = [e for e in self.events if e.get("event") == "stopped"]
        assert len(stopped) == 1, f"want one stopped line, got {stopped}; last: {self.events[-3:]}"
        assert self.events[-1].get("event") == "stopped", f"stopped is not the last line: {self.events[-3:]}"

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._reader.join(5)

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.stop()
        elif self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return False

    # ---- what the tests look at ----------------------------------------------
    def alive(self):
        return self.proc.poll() is None

    def requests(self):
        """The access-log lines ({"event":"request",...}) so far."""
        with self._lock:
            return [e for e in self.events if e.get("event") == "request"]

    def fds(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def status_kib(self, field):
        """A /proc/PID/status field in KiB (VmRSS, VmHWM, RssAnon...)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise AssertionError(f"no {field} in /proc/{self.proc.pid}/status")

    def wait_fds(self, want, timeout=10.0):
        """Polls until the fd count is at most want; returns the last count."""
        deadline = time.monotonic() + timeout
        while True:
            n = self.fds()
            if n <= want or time.monotonic() > deadline:
                return n
            time.sleep(0.1)


def spool_entries(spool):
    """Everything under the spool directory (relative paths), recursively."""
    out = []
    for root, dirs, files in os.walk(spool):
        for n in dirs + files:
            out.append(os.path.relpath(os.path.join(root, n), spool))
    return sorted(out)


def wait_spool_empty(spool, timeout=10.0):
    """Polls until the spool holds nothing; returns what it still holds."""
    deadline = time.monotonic() + timeout
    while True:
        left = spool_entries(spool)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


# ---- HTTP clients ------------------------------------------------------------
def request(port, method, path, body=None, headers=None, timeout=60):
    """One request on a fresh connection; returns (status, {lowercase header:
    value}, body bytes). body may be bytes or a path (streamed from the file)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        hdrs = dict(headers or {})
        if body is not None:
            size = os.path.getsize(body) if isinstance(body, str) else len(body)
            hdrs.setdefault("Content-Length", str(size))
        for k, v in hdrs.items():
            conn.putheader(k, v)
        conn.endheaders()
        if isinstance(body, str):
            with open(body, "rb") as f:
                for chunk in iter(lambda: f.read(SEND_CHUNK), b""):
                    conn.send(chunk)
        elif body:
            for at in range(0, len(body), SEND_CHUNK):
                conn.send(body[at:at + SEND_CHUNK])
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def scan_path(name):
    return "/v1/scan?name=" + urllib.parse.quote(name, safe="")


def post(port, path, body, headers=None, timeout=60):
    return request(port, "POST", path, body, headers, timeout)


def error_code(body):
    """The code of a JSON error body {"error":{"code","message"}}."""
    doc = json.loads(body)
    assert isinstance(doc.get("error"), dict), f"not an error body: {body[:200]!r}"
    assert isinstance(doc["error"].get("message"), str), f"error without a message: {doc}"
    return doc["error"].get("code")


def connect(port, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(sock, timeout):
    """Reads until the peer closes, a whole response (headers + Content-Length
    body) has arrived, or timeout; returns (status or None, headers, body,
    seconds). status None: the connection closed or timed out with no
    status line."""
    start = time.monotonic()
    sock.settimeout(0.2)
    buf = b""
    while time.monotonic() - start < timeout:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            break
        if not chunk:
            break
        buf += chunk
        head, sep, rest = buf.partition(b"\r\n\r\n")
        if sep:
            lines = head.decode("latin-1").split("\r\n")
            hdrs = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                hdrs[k.strip().lower()] = v.strip()
            if len(rest) >= int(hdrs.get("content-length", "0")):
                break
    elapsed = time.monotonic() - start
    head, sep, rest = buf.partition(b"\r\n\r\n")
    if not sep:
        return None, {}, buf, elapsed
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    assert len(parts) >= 2 and parts[0].startswith("HTTP/1."), f"bad status line {lines[0]!r}"
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return int(parts[1]), hdrs, rest, elapsed


def raw(port, data, timeout=10):
    """Sends data on a fresh connection and reads the answer (read_response)."""
    with connect(port) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return read_response(s, timeout)


def scan_head(name, length, extra=""):
    """The request head of POST /v1/scan?name=NAME with Content-Length."""
    return (f"POST {scan_path(name)} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Length: {length}\r\n{extra}\r\n").encode()


# ---- files posted ----------------------------------------------------------------
def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(SEND_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def big_safetensors(path, size):
    """A valid safetensors file of exactly size bytes: one U8 tensor, header
    padded to 4 KiB, data sparse (zeros)."""
    import struct
    n = size - 4096
    h = json.dumps({"w": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}},
                   separators=(",", ":")).encode()
    h += b" " * (4096 - 8 - len(h))
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(size)
    return path


def zip_checkpoint(path, pickle_bytes):
    """A torch-style zip checkpoint (archive/data.pkl + version) holding
    pickle_bytes."""
    import zipfile
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        z.writestr("archive/version", "3\n")
    return path


def cli_file_report(mg, policy_path, d, name, timeout=120):
    """files[0] of `modelgate scan --policy P -f json NAME` run in d (so the
    report's path is NAME, as the server's is)."""
    p = subprocess.run([mg, "scan", "--policy", policy_path, "-f", "json", name],
                       cwd=d, capture_output=True, timeout=timeout)
    assert p.returncode in (0, 1, 2), f"scan {name}: exit {p.returncode}: {p.stderr[-500:]!r}"
    doc = json.loads(p.stdout)
    assert doc.get("schema") == "modelgate.report/v1", f"scan {name}: {doc}"
    assert len(doc["files"]) == 1, f"scan {name}: {doc['files']}"
    return doc["files"][0]

