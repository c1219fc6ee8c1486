#!/usr/bin/env python3
"""Soak test for `engine-cli serve`: N clients send a mix of requests for a set time and a line is
printed every minute: requests done, errors (503 refusals counted apart: they are the server's
backpressure, not failures), p50/p99 latency, tokens generated per second and the server's RSS.
At the end the server's /metrics must show no sequence running or waiting and (with
--prompt-cache 0) no KV-cache block held. Standard library only; exits non-zero on any error.

The mix, per request: 40% streamed chat completions, 15% chat completions answered whole, 15%
text completions, 15% embeddings, 10% guard requests (when --guard is given; chat otherwise)
and 5% streams the client hangs up on after a few chunks.

  engine-cli serve -m qwen.gguf --guard qwen.gguf -c 2048 --prompt-cache 0 --queue 64 &
  python3 tools/soak.py --url http://127.0.0.1:8080 --model qwen --guard qwen \\
      --clients 64 --minutes 30 --pid $(pgrep -f "engine-cli serve")
"""

import argparse
import http.client
import json
import random
import re
import statistics
import sys
import threading
import time
import urllib.parse
import urllib.request


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, TypeError):
        return None
    return None


class Window:
    """What happened since the last report."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.requests = 0
        self.refused = 0
        self.errors = []
        self.latencies = []
        self.tokens = 0

    def add(self, latency=None, tokens=0, refused=False, error=None):
        with self.lock:
            self.requests += 1
            self.tokens += tokens
            if refused:
                self.refused += 1
            if error is not None:
                self.errors.append(error)
            if latency is not None:
                self.latencies.append(latency)

    def take(self):
        with self.lock:
            snapshot = (self.requests, self.refused, list(self.errors), list(self.latencies), self.tokens)
            self.reset()
            return snapshot


def request(args, host, port, kind, n):
    """One request of `kind`: (tokens generated, refused); raises on any failure."""
    prompt = f"Tell me something about the number {n}."
    if kind in ("stream", "hangup", "chat"):
        path = "/v1/chat/completions"
        body = {"model": args.model, "messages": [{"role": "user", "content": prompt}], "max_tokens": args.max_tokens,
                "stream": kind != "chat"}
        if kind != "chat":
            body["stream_options"] = {"include_usage": True}
    elif kind == "completion":
        path, body = "/v1/completions", {"model": args.model, "prompt": prompt, "max_tokens": args.max_tokens}
    elif kind == "embedding":
        path, body = "/v1/embeddings", {"model": args.model, "input": [prompt, prompt + " Again."]}
    else:
        path, body = "/v1/guard", {"model": args.guard, "input": {"user": prompt}, "risks": ["harm"]}
    conn = http.client.HTTPConnection(host, port, timeout=600)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status == 503:
            r.read()
            return 0, True
        if r.status != 200:
            raise RuntimeError(f"{path}: HTTP {r.status}: {r.read()[:200]!r}")
        if kind in ("stream", "hangup"):
            tokens, chunks, done = 0, 0, False
            for line in r:
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    done = True
                    break
                event = json.loads(data)
                if "error" in event:
                    raise RuntimeError(f"stream error: {event['error']}")
                chunks += 1
                if event.get("usage"):
                    tokens = event["usage"]["completion_tokens"]
                if kind == "hangup" and chunks >= 3:
                    return chunks, False  # the client goes away mid-stream
            if not done:
                raise RuntimeError("the stream ended without [DONE]")
            return tokens, False
        reply = json.loads(r.read())
        if "error" in reply:
            raise RuntimeError(f"{path}: {reply['error']}")
        return reply.get("usage", {}).get("completion_tokens", 0), False
    finally:
        conn.close()


def client(args, host, port, window, stop, seed):
    rng = random.Random(seed)
    kinds = ["stream"] * 40 + ["chat"] * 15 + ["completion"] * 15 + ["embedding"] * 15 + \
            (["guard"] if args.guard else ["chat"]) * 10 + ["hangup"] * 5
    n = 0
    while not stop.is_set():
        kind = rng.choice(kinds)
        n += 1
        started = time.monotonic()
        try:
            tokens, refused = request(args, host, port, kind, seed * 100000 + n)
            window.add(latency=None if refused else time.monotonic() - started, tokens=tokens, refused=refused)
            if refused:
                time.sleep(0.2)
        except Exception as e:  # every failure is counted and reported
            window.add(error=f"{kind}: {e}")


def metric(text, name):
    """The sum of every sample of `name` in a Prometheus text exposition."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? ([0-9.e+-]+)$", line)
        if m:
            total += float(m.group(2))
    return total


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--model", required=True)
    p.add_argument("--guard", help="the guard model's id (guard requests are part of the mix)")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--pid", type=int, help="the server's process id, for its RSS")
    p.add_argument("--report-seconds", type=float, default=60)
    args = p.parse_args()
    u = urllib.parse.urlparse(args.url)
    host, port = u.hostname, u.port or 80
    window, stop = Window(), threading.Event()
    threads = [threading.Thread(target=client, args=(args, host, port, window, stop, i), daemon=True) for i in range(args.clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    print("| minutes | requests | errors | 503 | p50 latency s | p99 latency s | tokens/s | RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    all_errors, rss_start = [], None
    end = start + args.minutes * 60
    while time.monotonic() < end:
        time.sleep(min(args.report_seconds, max(0.0, end - time.monotonic())))
        requests, refused, errors, latencies, tokens = window.take()
        all_errors += errors
        lat = sorted(latencies)
        p50 = statistics.median(lat) if lat else float("nan")
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
        rss = rss_mib(args.pid)
        rss_start = rss_start if rss_start is not None else rss
        rss_text = f"{rss:.0f}" if rss is not None else "-"
        print(f"| {(time.monotonic() - start) / 60:.1f} | {requests} | {len(errors)} | {refused} | {p50:.2f} | {p99:.2f} | {tokens / args.report_seconds:.1f} | {rss_text} |", flush=True)
    stop.set()
    for t in threads:
        t.join(timeout=600)
    time.sleep(2)
    with urllib.request.urlopen(args.url + "/metrics") as r:
        metrics = r.read().decode()
    running, queued, blocks = (metric(metrics, n) for n in ("running_sequences", "queue_depth", "kv_cache_blocks_used"))
    print(f"after the soak: running_sequences {running:.0f}, queue_depth {queued:.0f}, kv_cache_blocks_used {blocks:.0f}, "
          f"RSS {rss_start} -> {rss_mib(args.pid)} MiB")
    for e in all_errors[:20]:
        print("error:", e)
    ok = not all_errors and running == 0 and queued == 0
    print("soak:", "passed" if ok else f"FAILED ({len(all_errors)} errors)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
