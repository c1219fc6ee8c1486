#!/usr/bin/env python3
"""Requests per second of POST /v1/moderations on a running server: N requests one after
another, then N clients at once (one request each, all started together), alternating for a
number of rounds; prints each round and the medians. Short texts, a new one for every request,
so that only the format's start before the text is in the guard's prompt cache; with --repeat
the same N texts every time (a client sending the same messages again: whole prompts cached).

    tools/moderation-throughput.py http://127.0.0.1:8080 [-n 16] [-r 3] [--model ID] [--repeat]
"""

import argparse
import json
import statistics
import threading
import time
import urllib.request


def moderate(base, text, model):
    body = {"input": text}
    if model:
        body["model"] = model
    req = urllib.request.Request(base + "/v1/moderations", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    assert len(out["results"]) == 1, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("-n", type=int, default=16, help="requests (and clients) per round")
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("--model")
    ap.add_argument("--repeat", action="store_true", help="the same texts in every round and phase")
    args = ap.parse_args()

    run = f"{time.time_ns() % 10**9}."  # texts of earlier runs are in the cache too

    def texts(tag):
        tag = "" if args.repeat else run + tag
        return [f"Request {tag}{i}: can you help me plan a birthday party for my {i + 5} year old?" for i in range(args.n)]

    moderate(args.base, "warm-up", args.model)
    if args.repeat:
        for text in texts(""):
            moderate(args.base, text, args.model)
    seq, conc = [], []
    for r in range(args.rounds):
        t = time.perf_counter()
        for text in texts(f"{r}s."):
            moderate(args.base, text, args.model)
        seq.append(args.n / (time.perf_counter() - t))
        threads = [threading.Thread(target=moderate, args=(args.base, text, args.model)) for text in texts(f"{r}c.")]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        conc.append(args.n / (time.perf_counter() - t))
        print(f"round {r + 1}: sequential {seq[-1]:.2f} req/s, {args.n} concurrent {conc[-1]:.2f} req/s", flush=True)
    s, c = statistics.median(seq), statistics.median(conc)
    print(f"median: sequential {s:.2f} req/s, concurrent {c:.2f} req/s, ratio {c / s:.2f}x")


if __name__ == "__main__":
    main()
