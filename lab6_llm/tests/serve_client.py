"""mls-gpt serve, driven by real HTTP clients (requests and curl). Run by serve_command.sh:

    /usr/bin/python3 serve_client.py <mls-gpt> <ckpt.bin> <scratch dir>

Starts the server on a free loopback port and checks: /health; greedy completions equal
`mls-gpt sample --greedy`; streaming (SSE) gives the same text as non-streaming, with requests and
with curl; stop strings; seeds; every error case answers 4xx with a JSON error body; a client that
disconnects mid-stream frees its blocks; 1000 requests from 32 concurrent clients (random stream
or not, random disconnects, retries after 503 + Retry-After) each answered exactly once; the pool
back to full; SIGTERM drains a running request and exits 0.
"""
import json
import os
import random
import re
import signal
import shutil
import subprocess
import sys
import threading
import time

import requests

GPT, CKPT, TMP = sys.argv[1], sys.argv[2], sys.argv[3]


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def start_server(*extra):
    port_file = os.path.join(TMP, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    log = open(os.path.join(TMP, "server.log"), "w")
    proc = subprocess.Popen([GPT, "--threads", "2", "serve", "--ckpt", CKPT, "--port", "0",
                             "--port-file", port_file, *extra], stdout=log, stderr=subprocess.STDOUT)
    # Deadlines, not counts of polls: under ASan on a loaded 2-core machine (CI's step 2) the server
    # can take many seconds to start or to free a pool; each loop returns as soon as it holds.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.exists(port_file):
            return proc, "http://127.0.0.1:%s" % open(port_file).read().strip()
        if proc.poll() is not None:
            fail("the server exited at start: " + open(os.path.join(TMP, "server.log")).read())
        time.sleep(0.05)
    fail("the server did not write its port within 60 s: " + open(os.path.join(TMP, "server.log")).read())


def metrics(url):
    text = requests.get(url + "/metrics", timeout=10).text
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def wait_pool_full(url, what):
    deadline = time.monotonic() + 30
    while True:
        m = metrics(url)
        if m["mls_kv_blocks_used"] == 0 and m["mls_running_sequences"] == 0 and m["mls_queue_length"] == 0:
            check(m["mls_kv_blocks_free"] == m["mls_kv_blocks_total"], "free != total blocks")
            return m
        if time.monotonic() > deadline:
            fail("%s: the pool is not back to full after 30 s: %s" % (what, m))
        time.sleep(0.05)


def complete(url, **body):
    return requests.post(url + "/v1/completions", json=body, timeout=60)


def stream_events(resp):
    """The SSE events of a streaming response: a list of parsed JSON chunks, then '[DONE]'."""
    events = []
    for line in resp.iter_lines(decode_unicode=False):
        if not line or line.startswith(b":"):
            continue
        check(line.startswith(b"data: "), "an SSE line that is not data: %r" % line)
        payload = line[len(b"data: "):]
        events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return events


def stream_text(events):
    check(events and events[-1] == "[DONE]", "the stream does not end with [DONE]: %r" % events[-3:])
    check(events[-2]["choices"][0]["finish_reason"] in ("stop", "length"), "no finish_reason before [DONE]")
    return "".join(e["choices"][0]["text"] for e in events[:-1]), events[-2]["choices"][0]["finish_reason"]


# --step-delay-ms: the tiny model makes a token in well under a millisecond; a pause per step lets
# a client hang up mid-stream for certain
proc, URL = start_server("--kv-blocks", "24", "--block-tokens", "8", "--max-running", "8", "--max-queue", "16",
                         "--max-body", "65536", "--step-delay-ms", "2")
try:
    # ---- health, greedy = the sampler --------------------------------------------------------------
    r = requests.get(URL + "/health", timeout=10)
    check(r.status_code == 200 and r.json()["status"] == "ok", "health: %s %s" % (r.status_code, r.text))
    # ---- the listen backlog: a burst of clients must not overflow it ----------------------------------
    # (cpp-httplib listens with 5; each SYN dropped past it costs a client a 1 s retransmission: the
    # server listens again with SOMAXCONN. `ss` shows a listener's backlog as its Send-Q.)
    if shutil.which("ss"):
        port = URL.rsplit(":", 1)[1]
        out = subprocess.run(["ss", "-ltnH", "sport = :" + port], capture_output=True, text=True).stdout.split()
        check(len(out) >= 3 and int(out[2]) >= 128,
              "the server's listen backlog (ss Send-Q) is %s, expected >= 128: a burst of clients would wait "
              "1 s for a SYN retransmission (ss said: %r)" % (out[2] if len(out) >= 3 else "?", out))
        print("ok: the listen backlog is %s" % out[2], flush=True)
    else:
        print("ss not found: the listen backlog is not checked", flush=True)
    prompt = "ROMEO:"
    r = complete(URL, prompt=prompt, max_tokens=30, temperature=0)
    check(r.status_code == 200, "greedy completion: %s %s" % (r.status_code, r.text))
    body = r.json()
    greedy = body["choices"][0]["text"]
    check(body["object"] == "text_completion" and body["choices"][0]["finish_reason"] == "length",
          "completion shape: %s" % body)
    check(body["usage"] == {"prompt_tokens": 6, "completion_tokens": 30, "total_tokens": 36}, "usage: %s" % body["usage"])
    sample = subprocess.run([GPT, "--threads", "1", "sample", "--ckpt", CKPT, "--prompt", prompt, "-n", "30", "--greedy"],
                            capture_output=True, check=True).stdout.decode()
    check(sample.rstrip("\n") == prompt + greedy, "greedy through the server %r != mls-gpt sample %r" % (prompt + greedy, sample))
    print("ok: greedy completion equals mls-gpt sample --greedy: %r" % greedy, flush=True)

    # ---- streaming, with requests and with curl ----------------------------------------------------
    with requests.post(URL + "/v1/completions", json={"prompt": prompt, "max_tokens": 30, "temperature": 0,
                                                      "stream": True}, stream=True, timeout=60) as s:
        check(s.status_code == 200 and s.headers["Content-Type"].startswith("text/event-stream"),
              "stream: %s %s" % (s.status_code, s.headers))
        events = stream_events(s)
    text, reason = stream_text(events)
    check(text == greedy and reason == "length", "streamed %r (%s) != %r" % (text, reason, greedy))
    curl = subprocess.run(["curl", "-sN", "-H", "Content-Type: application/json", "-d",
                           json.dumps({"prompt": prompt, "max_tokens": 30, "temperature": 0, "stream": True}),
                           URL + "/v1/completions"], capture_output=True, check=True, timeout=60).stdout
    chunks = [json.loads(l[6:]) for l in curl.split(b"\n") if l.startswith(b"data: {")]
    check(curl.rstrip().endswith(b"data: [DONE]"), "curl: no [DONE]")
    check("".join(c["choices"][0]["text"] for c in chunks) == greedy, "curl's stream != the completion")
    print("ok: streaming (requests: %d events; curl) gives the same text" % len(events), flush=True)

    # ---- stop strings, seeds -----------------------------------------------------------------------
    stop = greedy[8:10]
    r = complete(URL, prompt=prompt, max_tokens=30, temperature=0, stop=[stop, "@@"])
    check(r.status_code == 200, "stop: %s" % r.text)
    c = r.json()["choices"][0]
    check(c["text"] == greedy[:greedy.find(stop)] and c["finish_reason"] == "stop",
          "stop %r: %r (%s), expected %r" % (stop, c["text"], c["finish_reason"], greedy[:greedy.find(stop)]))
    with requests.post(URL + "/v1/completions", json={"prompt": prompt, "max_tokens": 30, "temperature": 0,
                                                      "stop": stop, "stream": True}, stream=True, timeout=60) as s:
        text, reason = stream_text(stream_events(s))
    check(text == c["text"] and reason == "stop", "streamed with stop: %r (%s)" % (text, reason))
    a = complete(URL, prompt=prompt, max_tokens=20, temperature=0.9, top_k=20, top_p=0.95, seed=7).json()
    b = complete(URL, prompt=prompt, max_tokens=20, temperature=0.9, top_k=20, top_p=0.95, seed=7).json()
    check(a["choices"][0]["text"] == b["choices"][0]["text"], "the same seed gave different texts")
    print("ok: stop strings (cut, streamed too) and seeds", flush=True)

    # ---- errors: 4xx with a JSON error body ---------------------------------------------------------
    def expect_error(status, what, **kw):
        r = requests.post(URL + "/v1/completions", timeout=10, **kw)
        check(r.status_code == status, "%s: %s %s, expected %s" % (what, r.status_code, r.text, status))
        err = r.json()["error"]
        check(isinstance(err["message"], str) and err["message"], "%s: no message" % what)
        return err["message"]

    expect_error(400, "malformed JSON", data=b"{\"prompt\": ", headers={"Content-Type": "application/json"})
    expect_error(400, "not an object", json=[1, 2])
    expect_error(400, "no prompt", json={"max_tokens": 3})
    expect_error(400, "prompt of the wrong type", json={"prompt": 12})
    expect_error(400, "max_tokens of the wrong type", json={"prompt": "A", "max_tokens": "5"})
    expect_error(400, "max_tokens = 0", json={"prompt": "A", "max_tokens": 0})
    expect_error(400, "max_tokens < 0", json={"prompt": "A", "max_tokens": -3})
    expect_error(400, "temperature < 0", json={"prompt": "A", "temperature": -1})
    expect_error(400, "top_p = 0", json={"prompt": "A", "top_p": 0})
    expect_error(400, "stream not a boolean", json={"prompt": "A", "stream": "yes"})
    expect_error(400, "stop of the wrong type", json={"prompt": "A", "stop": [1]})
    msg = expect_error(400, "prompt longer than the context", json={"prompt": "A" * 64})
    check("context length" in msg, "too long: %s" % msg)
    expect_error(400, "a character outside the vocabulary", json={"prompt": "\u4e2d"})
    expect_error(413, "a huge body", data=b"{\"prompt\": \"" + b"A" * 100000 + b"\"}",
                 headers={"Content-Type": "application/json"})
    r = requests.get(URL + "/nothing", timeout=10)
    check(r.status_code == 404 and "error" in r.json(), "404: %s" % r.text)
    print("ok: every error case is a 4xx with a JSON error", flush=True)

    # ---- cancellation: a client that goes away mid-stream frees its blocks --------------------------
    s = requests.post(URL + "/v1/completions", json={"prompt": "KING:", "max_tokens": 55, "temperature": 1.0,
                                                     "stream": True}, stream=True, timeout=60)
    it = s.iter_lines()
    got = 0
    for line in it:
        if line.startswith(b"data: {"):
            got += 1
            if got == 2:
                break
    s.close()
    m = wait_pool_full(URL, "after a disconnect")
    check(m['mls_requests_total{status="cancelled"}'] >= 1, "no cancelled request counted")
    print("ok: a disconnect mid-stream cancels the request; the pool is full again", flush=True)

    # ---- 1000 requests, 32 concurrent clients, random disconnects, 503 retries -----------------------
    before = metrics(URL)
    lock = threading.Lock()
    tally = {"ok": 0, "disconnected": 0, "retries": 0, "answers": {}}
    words = ["ROMEO:", "KING:", "First Citizen:", "O, ", "What say you", "I am ", "ay, my lord"]

    def client(k):
        rng = random.Random(k)
        for i in range(k, 1000, 32):
            body = {"prompt": rng.choice(words), "max_tokens": rng.randint(1, 40), "seed": i,
                    "temperature": rng.choice([0, 0.8, 1.0])}
            stream = rng.random() < 0.5
            drop = stream and rng.random() < 0.15
            body["stream"] = stream
            while True:
                r = requests.post(URL + "/v1/completions", json=body, stream=stream, timeout=120)
                if r.status_code == 503:
                    check("Retry-After" in r.headers and "error" in r.json(), "503 without Retry-After or error")
                    with lock:
                        tally["retries"] += 1
                    r.close()
                    time.sleep(0.02 + 0.05 * rng.random())
                    continue
                break
            check(r.status_code == 200, "request %d: %s %s" % (i, r.status_code, r.text[:200]))
            if not stream:
                n = r.json()["usage"]["completion_tokens"]
                check(1 <= n <= body["max_tokens"], "request %d: %d tokens for max %d" % (i, n, body["max_tokens"]))
                with lock:
                    tally["ok"] += 1
                    tally["answers"][i] = tally["answers"].get(i, 0) + 1
                continue
            if drop:
                for line in r.iter_lines():
                    if line.startswith(b"data: {"):
                        break
                r.close()
                with lock:
                    tally["disconnected"] += 1
                    tally["answers"][i] = tally["answers"].get(i, 0) + 1
                continue
            text, reason = stream_text(stream_events(r))
            with lock:
                tally["ok"] += 1
                tally["answers"][i] = tally["answers"].get(i, 0) + 1

    errors = []

    def run(k):
        try:
            client(k)
        except SystemExit as e:
            errors.append(str(e))
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    t0 = time.time()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not errors, "clients failed: %s" % errors[:3])
    check(sorted(tally["answers"]) == list(range(1000)) and set(tally["answers"].values()) == {1},
          "not every request answered exactly once")
    m = wait_pool_full(URL, "after 1000 requests")
    done = m['mls_requests_total{status="ok"}'] - before['mls_requests_total{status="ok"}']
    cancelled = m['mls_requests_total{status="cancelled"}'] - before['mls_requests_total{status="cancelled"}']
    check(done + cancelled == 1000, "the server counted %d ok + %d cancelled, expected 1000" % (done, cancelled))
    check(done >= tally["ok"], "the server counted %d ok, the clients %d" % (done, tally["ok"]))
    print("ok: 1000 requests from 32 clients in %.1f s: %d completed, %d disconnected, %d retries after 503, "
          "%d preemptions; every block free" % (time.time() - t0, tally["ok"], tally["disconnected"],
                                                tally["retries"], m["mls_preemptions_total"]), flush=True)
    check(m["mls_time_to_first_token_seconds_count"] > 0 and m["mls_inter_token_latency_seconds_count"] > 0,
          "no TTFT / ITL observations")

    # ---- mls-gpt loadgen: Poisson arrivals, percentiles, the SVG ------------------------------------
    svg = os.path.join(TMP, "load.svg")
    out = subprocess.run([GPT, "loadgen", "--url", URL, "--requests", "24", "--clients", "4", "--rate", "0,200",
                          "--max-tokens", "12", "--svg", svg], capture_output=True, timeout=120)
    check(out.returncode == 0, "loadgen: %s" % out.stderr.decode())
    rows = [l.split() for l in out.stdout.decode().splitlines() if re.match(r"^\d", l)]
    check(len(rows) == 2 and all(r[1] == "24" and r[2] == "0" and r[3] == "0" for r in rows),
          "loadgen: not 24 answered per rate: %s" % out.stdout.decode())
    check(os.path.exists(svg) and open(svg).read().startswith("<svg"), "loadgen wrote no SVG")
    wait_pool_full(URL, "after loadgen")
    print("ok: mls-gpt loadgen at 2 rates:\n" + out.stdout.decode().rstrip(), flush=True)

    # ---- SIGTERM drains a running request and exits 0 ------------------------------------------------
    s = requests.post(URL + "/v1/completions", json={"prompt": "KING:", "max_tokens": 50, "temperature": 0,
                                                     "stream": True}, stream=True, timeout=60)
    lines = s.iter_lines()
    first = next(l for l in lines if l.startswith(b"data: {"))
    proc.send_signal(signal.SIGTERM)
    rest = [first] + [l for l in lines if l.startswith(b"data: ")]
    s.close()
    check(rest[-1] == b"data: [DONE]", "the running stream was cut by SIGTERM: %r" % rest[-2:])
    rc = proc.wait(timeout=60)
    check(rc == 0, "exit status %d after SIGTERM" % rc)
    print("ok: SIGTERM finished the running stream (%d events) and the server exited 0" % len(rest), flush=True)
finally:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
print("OK: mls-gpt serve with real clients", flush=True)
