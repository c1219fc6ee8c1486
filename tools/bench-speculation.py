#!/usr/bin/env python3
"""Speculative decoding served, side by side: one `engine-cli serve` per configuration (plain,
`--spec ngram`, `--draft DRAFT`, both together (`ngram + draft`: the lookup first, the draft
where it finds nothing); with `--compare-always` also the first two with `--spec-always`; with
`--draft-vocab N` also the draft (alone and with the lookup) with a head of its first N token
ids; `--only` picks some), all
started at once and measured in alternated rounds on two workloads (a code edit that repeats
its input, a story that does not), at 1 and at N concurrent streams of chat completions, greedy
or (`--temperature T`) sampled with stream i's seed i + 1. Each stream sends its own variant of
the workload (another variable to rename, another story), so that N streams are N different
sequences. Reports the aggregate tokens/s (wall time from the
first request to the last answer, prompts included; median over the rounds), the ratio to
plain, the proposals kept (from each reply's `usage.completion_tokens_details`), and whether
every configuration gave the same text (speculation keeps greedy and seeded outputs alike).
Standard library only.

  python3 tools/bench-speculation.py --model TARGET.gguf --draft DRAFT.gguf -t 2 --rounds 2 [--compare-always]
      [--draft-vocab N] [--only 'draft;draft, vocab'] [--kinds edit] [--streams 8]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

CODE = '''import csv
import statistics


def load_rows(path):
    rows = []
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        for record in reader:
            rows.append(record)
    return rows


def summarize(rows, column):
    values = [float(record[column]) for record in rows if record[column]]
    if not values:
        return None
    return {
        "count": len(values),
        "mean": statistics.mean(values),
        "median": statistics.median(values),
        "stdev": statistics.pstdev(values),
    }


def report(path, column):
    rows = load_rows(path)
    summary = summarize(rows, column)
    print(f"{path}: {summary}")
'''

RENAMES = [("record", "row_data"), ("rows", "records"), ("values", "numbers"), ("handle", "csv_file"),
           ("reader", "csv_reader"), ("summary", "stats"), ("column", "field"), ("path", "file_path")]
SUBJECTS = ["a lighthouse keeper who finds a message in a bottle", "a robot learning to bake bread",
            "a girl who can talk to rivers", "the last train out of a snowed-in town",
            "a chess player who never loses", "a map that redraws itself at night",
            "two rival beekeepers", "an astronaut growing tomatoes on Mars"]


def content(kind, i):
    if kind == "edit":
        old, new = RENAMES[i % len(RENAMES)]
        return (f"Rename the variable `{old}` to `{new}` everywhere in this Python code and print the whole "
                f"code again, nothing else.\n\n```python\n{CODE}```")
    return f"Write a short story about {SUBJECTS[i % len(SUBJECTS)]}."


def wait_ready(base, proc, timeout=300):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"the server for {base} exited with {proc.returncode}")
        try:
            urllib.request.urlopen(base + "/ready", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    sys.exit(f"{base} did not become ready")


def chat(base, text, max_tokens, temperature, seed):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
                       "temperature": temperature, "seed": seed}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    reply = json.load(urllib.request.urlopen(req, timeout=1200))
    details = reply["usage"].get("completion_tokens_details", {})
    kept = details.get("accepted_prediction_tokens", 0)
    return (reply["usage"]["completion_tokens"], reply["choices"][0]["message"]["content"], kept,
            kept + details.get("rejected_prediction_tokens", 0))


def measure(base, kind, streams, max_tokens, temperature):
    out = [None] * streams
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, chat(base, content(kind, i), max_tokens, temperature, i + 1)))
               for i in range(streams)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.time() - start
    if any(o is None for o in out):
        sys.exit(f"a request to {base} failed")
    return {"tokens": sum(o[0] for o in out), "seconds": seconds, "texts": [o[1] for o in out],
            "kept": sum(o[2] for o in out), "proposed": sum(o[3] for o in out)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--draft", required=True)
    p.add_argument("--engine", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "engine-cli"))
    p.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    p.add_argument("--streams", default="1,8", help="comma-separated concurrent stream counts")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy; above: sampled, stream i seeded with i + 1")
    p.add_argument("--port", type=int, default=18900)
    p.add_argument("--extra", default="", help="more flags for every server, e.g. '--draft-p-min 0'")
    p.add_argument("--compare-always", action="store_true",
                   help="two more servers with --spec-always (every round verified, none weighed)")
    p.add_argument("--draft-vocab", type=int, default=0,
                   help="one more server (two with --compare-always) whose draft has logits for its first N token ids only")
    p.add_argument("--only", default="", help="semicolon-separated configurations to run besides plain, e.g. 'draft;draft, vocab'")
    p.add_argument("--kinds", default="edit,story", help="comma-separated workloads: edit, story")
    args = p.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    kinds = args.kinds.split(",")
    configs = {"plain": [], "ngram": ["--spec", "ngram"], "draft": ["--draft", args.draft],
               "ngram + draft": ["--spec", "ngram", "--draft", args.draft]}
    if args.compare_always:
        configs["ngram, always"] = ["--spec", "ngram", "--spec-always"]
        configs["draft, always"] = ["--draft", args.draft, "--spec-always"]
    vocab = ["--draft-vocab", str(args.draft_vocab)]
    if args.draft_vocab:
        configs["draft, vocab"] = ["--draft", args.draft, *vocab]
        configs["ngram + draft, vocab"] = ["--spec", "ngram", "--draft", args.draft, *vocab]
        if args.compare_always:
            configs["draft, always, vocab"] = ["--draft", args.draft, "--spec-always", *vocab]
    if args.only:
        wanted = {"plain", *(name.strip() for name in args.only.split(";"))}
        configs = {name: flags for name, flags in configs.items() if name in wanted}
    servers = {}
    for n, (name, flags) in enumerate(configs.items()):
        port = args.port + n
        cmd = [args.engine, "serve", "--model", args.model, "--alias", "m", "--port", str(port), "-t", str(args.threads),
               "-c", "2048", "--prompt-cache", "0", "--parallel", str(max(streams)), *flags, *args.extra.split()]
        log = open(f"/tmp/bench-speculation-{name.replace(', ', '-').replace(' + ', '+')}.log", "w")
        servers[name] = (f"http://127.0.0.1:{port}", subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
    try:
        for base, proc in servers.values():
            wait_ready(base, proc)
        results = {}  # (kind, streams, config) -> [runs]
        for r in range(args.rounds):
            for kind in kinds:
                for s in streams:
                    for name, (base, _) in servers.items():
                        run = measure(base, kind, s, args.max_tokens, args.temperature)
                        results.setdefault((kind, s, name), []).append(run)
                        print(f"round {r + 1} {kind} x{s} {name}: {run['tokens']} tokens in {run['seconds']:.1f} s",
                              file=sys.stderr)
    finally:
        for _, proc in servers.values():
            proc.terminate()
        for _, proc in servers.values():
            proc.wait()
    titles = {"plain": "plain", "ngram": "--spec ngram", "draft": "--draft",
              "ngram, always": "--spec ngram --spec-always", "draft, always": "--draft --spec-always",
              "ngram + draft": "--spec ngram --draft",
              "draft, vocab": f"--draft --draft-vocab {args.draft_vocab}",
              "ngram + draft, vocab": f"--spec ngram --draft --draft-vocab {args.draft_vocab}",
              "draft, always, vocab": f"--draft --spec-always --draft-vocab {args.draft_vocab}"}
    print("| workload | streams | " + " | ".join(titles[name] for name in configs) + " |\n|---|---|"
          + "---|" * len(configs))
    for kind in kinds:
        for s in streams:
            speed = {name: statistics.median(run["tokens"] / run["seconds"] for run in results[(kind, s, name)])
                     for name in configs}
            cells = [f"{speed['plain']:.1f} t/s"]
            for name in list(configs)[1:]:
                runs = results[(kind, s, name)]
                kept, proposed = sum(x["kept"] for x in runs), sum(x["proposed"] for x in runs)
                cells.append(f"{speed[name]:.1f} t/s ({speed[name] / speed['plain']:.2f}x; {kept} of {proposed} kept)")
            same = all(results[(kind, s, name)][0]["texts"] == results[(kind, s, "plain")][0]["texts"] for name in configs)
            print(f"| {kind} | {s} | " + " | ".join(cells) + " |" + ("" if same else " (texts differ!)"))


if __name__ == "__main__":
    main()
