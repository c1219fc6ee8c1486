#!/usr/bin/env python3
"""Load test for an OpenAI-style server (ours or llama-server): N clients stream chat
completions concurrently and the aggregate generation speed, time to first token, errors and
(with --pid) the server's resident memory are reported. Standard library only.

  python3 tools/load-test.py --url http://127.0.0.1:8080 --model qwen --concurrency 8 --requests 2
  python3 tools/load-test.py ... --duration 60 --pid $(pgrep -f "engine-cli serve")
  python3 tools/load-test.py ... --concurrency 100 --disconnect-after 3   # clients that hang up
  python3 tools/load-test.py ... --concurrency 1 --requests 2 --system "$(cat long.txt)" --each
      # one line per request: time to first token and prompt tokens found in the cache
"""

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.tokens = 0
        self.completed = 0
        self.disconnected = 0
        self.errors = []
        self.ttft = []
        self.rejected = 0
        self.window_chunks = 0

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                if k == "ttft":
                    self.ttft.append(v)
                elif k == "error":
                    self.errors.append(v)
                else:
                    setattr(self, k, getattr(self, k) + v)


def one_request(args, host, port, client, n, stats, window_end=None):
    body = {
        "model": args.model,
        "messages": [{"role": "user", "content": f"{args.prompt} (story {client}.{n})"}],
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "seed": client * 1000 + n,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if args.system:
        body["messages"].insert(0, {"role": "system", "content": args.system})
    conn = http.client.HTTPConnection(host, port, timeout=args.timeout)
    start = time.monotonic()
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status == 503:
            stats.add(rejected=1)
            resp.read()
            return
        if resp.status != 200:
            stats.add(error=f"HTTP {resp.status}: {resp.read()[:200]!r}")
            return
        chunks = 0
        usage_tokens = None
        cached = None
        done = False
        first = None
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            event = json.loads(data)
            if "error" in event:
                stats.add(error=f"stream error: {event['error']}")
                return
            if event.get("usage"):
                usage_tokens = event["usage"].get("completion_tokens")
                cached = (event["usage"].get("prompt_tokens_details") or {}).get("cached_tokens")
            for choice in event.get("choices", []):
                if choice.get("delta", {}).get("content"):
                    chunks += 1
                    if window_end is not None and time.monotonic() <= window_end:
                        stats.add(window_chunks=1)
                    if first is None:
                        first = time.monotonic() - start
                        stats.add(ttft=first)
                    if args.disconnect_after and chunks >= args.disconnect_after:
                        conn.sock.close()  # hang up mid-stream
                        stats.add(disconnected=1)
                        return
        if not done:
            stats.add(error="stream ended without [DONE]")
            return
        stats.add(completed=1, tokens=usage_tokens if usage_tokens is not None else chunks)
        if args.each:
            ttft = f"{first:.3f} s" if first is not None else "none"
            print(f"client {client} request {n}: ttft {ttft}, completion tokens {usage_tokens}, cached prompt tokens {cached}", flush=True)
    except Exception as e:  # noqa: BLE001 - every failure is reported
        stats.add(error=f"{type(e).__name__}: {e}")
    finally:
        conn.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--model", required=True)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=1, help="requests per client (without --duration)")
    p.add_argument("--duration", type=float, help="keep sending for this many seconds")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--prompt", default="Write a long story about a lighthouse keeper and a storm.")
    p.add_argument("--system", help="a system prompt for every request")
    p.add_argument("--disconnect-after", type=int, help="hang up after this many content chunks")
    p.add_argument("--each", action="store_true", help="print each request's time to first token and cached prompt tokens")
    p.add_argument("--pid", type=int, help="the server's pid: report its resident memory")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args()
    url = urllib.parse.urlparse(args.url)
    stats = Stats()
    rss_start = rss_kib(args.pid) if args.pid else None
    rss_max = [rss_start or 0]
    stop = threading.Event()

    def sample():
        while not stop.wait(1.0):
            r = rss_kib(args.pid)
            if r:
                rss_max[0] = max(rss_max[0], r)

    if args.pid:
        threading.Thread(target=sample, daemon=True).start()
    start = time.monotonic()

    def client(i):
        n = 0
        while True:
            if args.duration is None and n >= args.requests:
                return
            if args.duration is not None and time.monotonic() - start >= args.duration:
                return
            window_end = start + args.duration if args.duration is not None else None
            one_request(args, url.hostname, url.port or 80, i, n, stats, window_end)
            n += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    stop.set()
    summary = {
        "concurrency": args.concurrency,
        "wall_s": round(wall, 2),
        "completed": stats.completed,
        "disconnected": stats.disconnected,
        "rejected_503": stats.rejected,
        "errors": len(stats.errors),
        "completion_tokens": stats.tokens,
        "aggregate_tokens_per_s": round(stats.tokens / wall, 2) if wall > 0 else 0,
        # with --duration: content chunks (about one token each) that arrived within the
        # window, while every client was busy: the steady rate, without the tail of requests
        # finishing one by one after it
        "window_tokens_per_s": round(stats.window_chunks / args.duration, 2) if args.duration else None,
        "ttft_mean_s": round(statistics.mean(stats.ttft), 3) if stats.ttft else None,
        "ttft_p95_s": round(sorted(stats.ttft)[int(0.95 * (len(stats.ttft) - 1))], 3) if stats.ttft else None,
    }
    if args.pid:
        summary.update({"rss_start_mib": round((rss_start or 0) / 1024, 1), "rss_end_mib": round((rss_kib(args.pid) or 0) / 1024, 1), "rss_max_mib": round(rss_max[0] / 1024, 1)})
    if args.json:
        print(json.dumps(summary))
    else:
        for k, v in summary.items():
            print(f"{k:>24}: {v}")
    for e in stats.errors[:10]:
        print("error:", e, file=sys.stderr)
    sys.exit(1 if stats.errors else 0)


if __name__ == "__main__":
    main()
