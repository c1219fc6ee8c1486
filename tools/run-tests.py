#!/usr/bin/env python3
"""Runs the test binaries cargo built, as `cargo test` would, and reports where the time went.

    cargo test --no-run --message-format=json-render-diagnostics ... | tools/run-tests.py [ARG...]

Reads cargo's JSON messages on stdin, then runs every test executable in its package's folder:
the libtest binaries with ARG... (a filter, `--ignored`, ...) and each test's time reported, the
benches (criterion, `harness = false`) once in test mode, as `cargo test` runs them. Every binary
runs even after a failure. Prints each binary's time, then the 10 slowest tests; exits 1 when a
test failed.

libtest reports a test's time only behind `-Z unstable-options`, which a stable toolchain allows
when RUSTC_BOOTSTRAP is set: it is set for the test processes only, never for the compiler, so
the build is the same as `cargo test`'s.
"""
import json
import os
import re
import subprocess
import sys
import time

TEST_TIME = re.compile(r"^test (.+?) \.\.\. (ok|FAILED|ignored)(?: <([0-9.]+)s>)?\s*$")


def executables(messages):
    """(package, kind, name, path, folder) of each test executable in cargo's messages."""
    found = []
    for line in messages:
        line = line.strip()
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable") or not msg["profile"]["test"]:
            continue
        target = msg["target"]
        package = msg["package_id"].split("#")[0].rsplit("/", 1)[-1]
        folder = os.path.dirname(msg["manifest_path"])
        found.append((package, target["kind"][0], target["name"], msg["executable"], folder))
    return found


def run(binary, args):
    """Runs one test binary, echoing its output; returns (exit status, seconds, [(test, seconds)])."""
    package, kind, name, path, folder = binary
    bench = kind == "bench"
    argv = [path] + ([] if bench else ["-Z", "unstable-options", "--report-time"] + args)
    print(f"     Running {package} {kind} {name} ({os.path.relpath(path)})", flush=True)
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    times = []
    for line in proc.stdout:
        sys.stdout.write(line)
        m = TEST_TIME.match(line)
        if m and m.group(3):
            times.append((f"{package}::{name}::{m.group(1)}", float(m.group(3))))
    status = proc.wait()
    return status, time.monotonic() - t0, times


def main():
    binaries = executables(sys.stdin)
    if not binaries:
        sys.exit("run-tests: cargo built no test executable")
    args = sys.argv[1:]
    failed, per_binary, per_test = [], [], []
    for binary in binaries:
        status, seconds, times = run(binary, args)
        per_binary.append((seconds, binary))
        per_test += times
        if status != 0:
            failed.append(binary)
    print("\n== time per test binary")
    for seconds, (package, kind, name, _, _) in sorted(per_binary, reverse=True):
        print(f"{seconds:8.1f} s  {package} {kind} {name}")
    print("== the 10 slowest tests")
    for name, seconds in sorted(per_test, key=lambda t: -t[1])[:10]:
        print(f"{seconds:8.1f} s  {name}")
    print(f"== {len(binaries)} test binaries in {sum(s for s, _ in per_binary):.0f} s")
    if failed:
        for package, kind, name, _, _ in failed:
            print(f"run-tests: FAILED: {package} {kind} {name}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
