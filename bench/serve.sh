#!/usr/bin/env bash
# bench/serve.sh BUILD_DIR: `modelgate serve` against one `modelgate scan`
# process per file (issue 13 point 5), in the same run on the same files:
#  - small files (4-40 KiB safetensors and pickles, half of the pickles
#    hostile): requests/s and p50/p99 latency of MG_BENCH_CLIENTS (default 4)
#    client threads posting to the server, next to files/s and per-file
#    latency of one process per file, serially and MG_BENCH_CLIENTS at once;
#  - large files (MG_BENCH_LARGE x 256 MiB of random bytes): MB/s through the
#    server (one client, then MG_BENCH_CLIENTS at once) and by a process per
#    file;
#  - the server's peak RSS (VmHWM) over the whole run.
# Ratios are server / per-process (target >= 5x for small files). The server
# runs with --workers max(clients, nproc): a kept-alive connection holds its
# worker while it lasts. Files are in the page cache for both. Needs
# (MG_BENCH_LARGE + MG_BENCH_CLIENTS) x 256 MiB free under $TMPDIR (files +
# spool).
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
mg="$build/cli/modelgate"
[[ -x $mg ]] || { echo "build $mg first" >&2; exit 2; }
"$mg" serve --help >/dev/null 2>&1 || { echo "$mg has no serve command" >&2; exit 2; }
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
large=${MG_BENCH_LARGE:-2}
clients=${MG_BENCH_CLIENTS:-4}
bench_scratch $(((large + clients) * 256 + 64)) serve
echo "modelgate serve vs one process per file; $(nproc) cores; build $(grep -m1 '^CMAKE_BUILD_TYPE' "$build/CMakeCache.txt" 2>/dev/null | cut -d= -f2 | sed 's/^$/default/' || echo '?')"

/usr/bin/python3 - "$mg" "$data" "$large" "$clients" "${MG_BENCH_SMALL:-400}" <<'PY'
import http.client, json, os, pickle, signal, struct, subprocess, sys, threading, time, urllib.parse
from concurrent.futures import ThreadPoolExecutor

mg, data, large, clients, small_n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
small_dir, large_dir, spool = (os.path.join(data, n) for n in ("small", "large", "spool"))
for p in (small_dir, large_dir, spool):
    os.makedirs(p)
pol = os.path.join(data, "policy.yaml")
with open(pol, "w") as f:
    f.write("apiVersion: modelgate/v1\nkind: Policy\n")

def st(n_floats, fill):
    h = json.dumps({"w": {"dtype": "F32", "shape": [n_floats], "data_offsets": [0, 4 * n_floats]}},
                   separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + bytes([fill]) * (4 * n_floats)

evil = b"\x80\x02cposix\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03."
small = []
for i in range(small_n):
    if i % 2 == 0:
        name, body = f"s{i:04d}.safetensors", st(1024 * (1 + i % 10), i % 256)
    elif i % 4 == 1:
        name, body = f"p{i:04d}.pkl", pickle.dumps({"i": i, "v": list(range(200 * (1 + i % 10)))}, protocol=2 + i % 4)
    else:
        name, body = f"e{i:04d}.pkl", evil + b"\0" * (i % 64)
    with open(os.path.join(small_dir, name), "wb") as f:
        f.write(body)
    small.append((name, body))
big = []
block = os.urandom(16 << 20)
for i in range(large):
    n = (256 << 20) - 4096
    h = json.dumps({"w": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}, separators=(",", ":")).encode()
    h += b" " * (4096 - 8 - len(h))
    path = os.path.join(large_dir, f"big{i}.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.write(bytes([i]) + block[1:])
        for _ in range(15):
            f.write(block)
        f.truncate(256 << 20)  # header + n bytes of data
    big.append(path)
    with open(path, "rb") as f:  # into the page cache
        while f.read(1 << 24):
            pass

def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]

rows = []

# ---- one process per file ------------------------------------------------------
def scan_one(name):
    t = time.monotonic()
    p = subprocess.run([mg, "scan", "--policy", pol, "-f", "json", name], cwd=small_dir, capture_output=True)
    assert p.returncode in (0, 1), (name, p.returncode, p.stderr[-300:])
    return time.monotonic() - t, json.loads(p.stdout)["files"][0]["verdict"]

cli_verdicts = {}
def per_process(parallel):
    lat = []
    t0 = time.monotonic()
    with ThreadPoolExecutor(parallel) as ex:
        for (name, _), (dt, v) in zip(small, ex.map(scan_one, [n for n, _ in small])):
            lat.append(dt)
            cli_verdicts[name] = v
    return len(small) / (time.monotonic() - t0), lat

proc1_rate, proc1_lat = per_process(1)
procN_rate, procN_lat = per_process(clients)

# ---- the server -------------------------------------------------------------------
srv = subprocess.Popen([mg, "serve", "--policy", pol, "--listen", "127.0.0.1:0", "--spool", spool,
                        "--workers", str(max(clients, os.cpu_count())), "--queue", "256",
                        "--max-body-bytes", str(300 << 20)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
port = json.loads(srv.stderr.readline())["port"]
threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()  # drain the access log
peak = [0]
def hwm():
    with open(f"/proc/{srv.pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
for _ in range(100):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/healthz")
        if c.getresponse().status == 200:
            break
    except OSError:
        time.sleep(0.05)

def post(conn, name, body):
    conn.putrequest("POST", "/v1/scan?name=" + urllib.parse.quote(name, safe=""))
    size = os.path.getsize(body) if isinstance(body, str) else len(body)
    conn.putheader("Content-Length", str(size))
    if isinstance(body, bytes):
        conn.endheaders(body)  # one send: no Nagle / delayed-ACK stall between head and body
    else:
        conn.endheaders()
        with open(body, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                conn.send(chunk)
    r = conn.getresponse()
    doc = r.read()
    assert r.status == 200, (name, r.status, doc[:300])
    return json.loads(doc)["files"][0]["verdict"]

def server_small(keepalive):
    lat, lock, at = [], threading.Lock(), [0]
    mismatches = []
    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                i = at[0]
                at[0] += 1
            if i >= len(small):
                break
            name, body = small[i]
            if not keepalive:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            t = time.monotonic()
            v = post(conn, name, body)
            dt = time.monotonic() - t
            with lock:
                lat.append(dt)
                if v != cli_verdicts[name]:
                    mismatches.append((name, v, cli_verdicts[name]))
        conn.close()
    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not mismatches, mismatches[:5]
    return len(small) / (time.monotonic() - t0), lat

server_small(True)  # warm-up
srv_new_rate, srv_new_lat = server_small(False)
srv_ka_rate, srv_ka_lat = server_small(True)

def large_server(parallel):
    t0 = time.monotonic()
    def one(path):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        v = post(conn, os.path.basename(path), path)
        conn.close()
        assert v == "pass", v
    with ThreadPoolExecutor(parallel) as ex:
        list(ex.map(one, big * parallel))
    return parallel * len(big) * (256 << 20) / 1e6 / (time.monotonic() - t0)

def large_proc():
    t0 = time.monotonic()
    for path in big:
        p = subprocess.run([mg, "scan", "--policy", pol, "-q", path], capture_output=True)
        assert p.returncode == 0, p.stderr[-300:]
    return len(big) * (256 << 20) / 1e6 / (time.monotonic() - t0)

proc_mbs = large_proc()
srv_mbs1 = large_server(1)
srv_mbsN = large_server(clients)
peak_kib = hwm()
srv.send_signal(signal.SIGTERM)
rc = srv.wait(60)
left = os.listdir(spool)

ms = lambda xs, q: f"{1000 * pct(xs, q):.1f}"
print(f"\nsmall files: {len(small)} ({sum(len(b) for _, b in small) / len(small) / 1024:.1f} KiB mean; "
      f"{sum(1 for v in cli_verdicts.values() if v == 'reject')} rejected), {clients} clients")
print(f"{'how':<38} {'files/s':>9} {'p50_ms':>8} {'p99_ms':>8} {'ratio':>7}")
for how, rate, lat in (("process per file, serial", proc1_rate, proc1_lat),
                       (f"process per file, {clients} at once", procN_rate, procN_lat),
                       ("serve, connection per request", srv_new_rate, srv_new_lat),
                       ("serve, kept-alive connections", srv_ka_rate, srv_ka_lat)):
    print(f"{how:<38} {rate:9.0f} {ms(lat, 0.5):>8} {ms(lat, 0.99):>8} {rate / procN_rate:6.1f}x")
print(f"(ratio: to {clients} processes at once; to serial processes: "
      f"{srv_new_rate / proc1_rate:.1f}x / {srv_ka_rate / proc1_rate:.1f}x)")
print(f"\nlarge files: {len(big)} x 256 MiB (random bytes)")
print(f"{'how':<38} {'MB/s':>9} {'ratio':>7}")
for how, rate in (("process per file, serial", proc_mbs), ("serve, 1 client", srv_mbs1),
                  (f"serve, {clients} clients", srv_mbsN)):
    print(f"{how:<38} {rate:9.0f} {rate / proc_mbs:6.1f}x")
print(f"\nserver peak RSS (VmHWM): {peak_kib / 1024:.1f} MiB; exit {rc} after SIGTERM; spool left: {len(left)} entries")
sys.exit(0 if rc == 0 and not left else 1)
PY
