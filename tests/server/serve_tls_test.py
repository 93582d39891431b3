"""`modelgate serve --tls-cert --tls-key` and the server's start-up refusals:
HTTPS with a certificate made here by the openssl program, the bearer token
over it, a plain-HTTP client refused, the spool empty after; and every
reason serve will not start (policy, spool, token file, address, option
ranges) is exit 2 with a message, before anything listens.

    serve_tls_test.py MODELGATE
"""
import http.client
import json
import os
import signal
import ssl
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from mgtest import eq, main, run_text, st_bytes, test, write  # noqa: E402

MG = os.path.abspath(sys.argv[1])
POLICY = "apiVersion: modelgate/v1\nkind: Policy\nfailOn: high\n"


def certificate(d):
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def start(argv):
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    line = p.stderr.readline()
    doc = json.loads(line)
    eq(doc.get("event"), "listening", "first line")
    return p, doc


def stop(p):
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=30)
    rest = [json.loads(x) for x in p.stderr.read().decode().splitlines() if x.strip()]
    p.stderr.close()
    eq(rc, 0, "exit after SIGTERM")
    return rest


@test
def https_with_a_token(d):
    cert, key = certificate(d)
    pol = write(d, "policy.yaml", POLICY)
    tok = write(d, "token", "s3cret-token\n")
    os.chmod(tok, 0o600)
    spool = os.path.join(d, "spool")
    p, doc = start([MG, "serve", "--policy", pol, "--listen", "127.0.0.1:0", "--spool", spool,
                    "--tls-cert", cert, "--tls-key", key, "--token-file", tok])
    try:
        eq(doc["tls"], True, "listening line says TLS")
        ctx = ssl.create_default_context(cafile=cert)
        port = doc["port"]

        def ask(method, path, body=None, headers=None):
            c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            out = (r.status, r.read())
            c.close()
            return out

        eq(ask("GET", "/healthz")[0], 200, "healthz over TLS")
        good = st_bytes({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, b"abcd")
        eq(ask("POST", "/v1/scan?name=m.safetensors", good)[0], 401, "no token")
        eq(ask("POST", "/v1/scan?name=m.safetensors", good, {"Authorization": "Bearer wrong"})[0],
           403, "wrong token")
        status, body = ask("POST", "/v1/scan?name=m.safetensors", good,
                           {"Authorization": "Bearer s3cret-token"})
        eq(status, 200, "right token")
        report = json.loads(body)
        eq(report["files"][0]["path"], "m.safetensors", "path is the name")
        eq(report["files"][0]["verdict"], "pass", "verdict")
        # A client speaking plain HTTP to the TLS port gets no HTTP answer.
        plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            plain.request("GET", "/healthz")
            got = plain.getresponse().status
        except (OSError, http.client.HTTPException):
            got = None
        eq(got, None, "plain HTTP on the TLS port")
        eq(os.listdir(spool), [], "spool after the requests")
        eq(stat.S_IMODE(os.stat(spool).st_mode), 0o700, "spool mode")
    finally:
        if p.poll() is None:
            events = stop(p)
            eq(events[-1]["event"], "stopped", "last line")


@test
def refusals_to_start_are_exit_2(d):
    pol = write(d, "policy.yaml", POLICY)
    bad_policy = write(d, "bad.yaml", "apiVersion: modelgate/v1\nkind: Policy\nfailOn: sometimes\n")
    empty_token = write(d, "empty-token", "\n")
    spaced_token = write(d, "spaced-token", "a b\n")
    long_token = write(d, "long-token", "x" * 4097)
    ok_token = write(d, "ok-token", "x" * 4096)
    open_spool = os.path.join(d, "open-spool")
    os.makedirs(open_spool)
    os.chmod(open_spool, 0o777)
    link_spool = os.path.join(d, "link-spool")
    os.symlink(open_spool, link_spool)
    spool = os.path.join(d, "spool")
    cases = [
        ([], "needs --policy"),
        (["--policy", bad_policy], "policy"),
        (["--policy", pol, "--listen", "localhost:8080"], "--listen"),
        (["--policy", pol, "--listen", "127.0.0.1:65536"], "--listen"),
        (["--policy", pol, "--workers", "0"], "--workers"),
        (["--policy", pol, "--workers", "33"], "--workers"),
        (["--policy", pol, "--queue", "65537"], "--queue"),
        (["--policy", pol, "--header-timeout", "0"], "timeout"),
        (["--policy", pol, "--body-timeout", "86401"], "timeout"),
        (["--policy", pol, "--max-body-bytes", "0"], "--max-body-bytes"),
        (["--policy", pol, "--tls-cert", pol], "--tls-key"),
        (["--policy", pol, "--token-file", empty_token], "no token"),
        (["--policy", pol, "--token-file", spaced_token], "printable"),
        (["--policy", pol, "--token-file", long_token], "kMaxTokenFileBytes"),
        (["--policy", pol, "--spool", open_spool], "no one else can write"),
        (["--policy", pol, "--spool", link_spool], "symlink"),
    ]
    for args, want in cases:
        argv = [MG, "serve"] + args
        if "--listen" not in args:
            argv += ["--listen", "127.0.0.1:0"]
        if "--spool" not in args:
            argv += ["--spool", spool]
        code, _, err = run_text(argv, timeout=30)
        eq(code, 2, f"{args}: exit")
        if want not in err:
            raise AssertionError(f"{args}: stderr {err!r} lacks {want!r}")
    # At the limits they start: 32 workers, queue 65536, a 4096-byte token.
    p, doc = start([MG, "serve", "--policy", pol, "--listen", "127.0.0.1:0", "--spool", spool,
                    "--workers", "32", "--queue", "65536", "--token-file", ok_token])
    eq(doc["workers"], 32, "workers")
    # A second server on the same spool is refused while the first runs.
    code, _, err = run_text([MG, "serve", "--policy", pol, "--listen", "127.0.0.1:0", "--spool", spool],
                            timeout=30)
    eq(code, 2, "second server on one spool")
    if "another modelgate serve" not in err:
        raise AssertionError(err)
    stop(p)


sys.exit(main(prefix="mg-serve-tls-"))
