#!/usr/bin/env python3
"""Runs the test binaries cargo builds, as `cargo test` would, while cargo builds the rest, and
reports where the time went.

    cargo test --no-run --message-format=json-render-diagnostics ... \
        | tools/run-tests.py [--fixtures CMD] [ARG...]

Reads cargo's JSON messages on stdin as cargo writes them. With --fixtures, CMD (a shell command)
runs once, as soon as cargo has built engine-cli, with that binary's path as its last argument:
the fixtures are made beside the rest of the build. Every test executable then runs in its
package's folder once the fixtures are there, in the order cargo finishes them: one at a time
beside the build's tail (the build keeps its lower priority, tools/test.sh), then as many at once
as the machine has cores, each one's output printed whole when it ends: the libtest binaries
with ARG... (a filter, `--ignored`, ...) and each test's time reported, the benches (criterion,
`harness = false`) once in test mode, as `cargo test` runs them. Every binary runs even after a
failure; a failed build runs nothing more. Prints when the build and the fixtures finished, each
binary's time (wall and CPU), then the 10 slowest tests; exits 1 when the build, the fixtures or a
test failed.

libtest reports a test's time only behind `-Z unstable-options`, which a stable toolchain allows
when RUSTC_BOOTSTRAP is set: it is set for the test processes only, never for the compiler, so
the build is the same as `cargo test`'s.
"""
import json
import os
import queue
import re
import shlex
import subprocess
import sys
import threading
import time

TEST_TIME = re.compile(r"^test (.+?) \.\.\. (ok|FAILED|ignored)(?: <([0-9.]+)s>)?\s*$")


BUILD_DONE = "build-finished"


def read_messages(messages, out):
    """Puts on `out`, as cargo reports them: ("cli", path) for engine-cli, ("test", (package,
    kind, name, path, folder)) for each test executable, then (BUILD_DONE, success). Reads to the
    end, so that cargo never waits on a full pipe while a test runs."""
    success = False
    for line in messages:
        line = line.strip()
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if msg.get("reason") == BUILD_DONE:
            success = bool(msg.get("success"))
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        target = msg["target"]
        if not msg["profile"]["test"]:
            if target["name"] == "engine-cli" and "bin" in target["kind"]:
                out.put(("cli", msg["executable"]))
            continue
        package = msg["package_id"].split("#")[0].rsplit("/", 1)[-1]
        folder = os.path.dirname(msg["manifest_path"])
        out.put(("test", (package, target["kind"][0], target["name"], msg["executable"], folder)))
    out.put((BUILD_DONE, success))


def run(binary, args, lock):
    """Runs one test binary, its output held until it ends, then printed whole under `lock` (the
    binaries that run side by side never interleave their lines); returns (exit status, seconds,
    CPU seconds of it and the processes it waited for, [(test, seconds)])."""
    package, kind, name, path, folder = binary
    bench = kind == "bench"
    argv = [path] + ([] if bench else ["-Z", "unstable-options", "--report-time"] + args)
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    with lock:
        print(f"     Running {package} {kind} {name} ({os.path.relpath(path)})", flush=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    lines = proc.stdout.readlines()
    # wait4 gives this child's own resource usage: several children run at once
    _, wait_status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(wait_status)
    seconds = time.monotonic() - t0
    times = []
    for line in lines:
        m = TEST_TIME.match(line)
        if m and m.group(3):
            times.append((f"{package}::{name}::{m.group(1)}", float(m.group(3))))
    with lock:
        print(f"     Output of {package} {kind} {name} ({seconds:.1f} s)", flush=True)
        sys.stdout.write("".join(lines))
        sys.stdout.flush()
    return proc.returncode, seconds, usage.ru_utime + usage.ru_stime, times


def main():
    args = sys.argv[1:]
    fixtures_cmd = None
    if args[:1] == ["--fixtures"]:
        fixtures_cmd, args = args[1], args[2:]
    t0 = time.monotonic()
    messages = queue.Queue()
    threading.Thread(target=read_messages, args=(sys.stdin, messages), daemon=True).start()
    fixtures = None
    pending, build_ok, build_seconds = [], None, None
    failed, per_binary, per_test = [], [], []

    def take(block):
        """Moves cargo's next report (waiting for it when `block`) into the state above."""
        nonlocal fixtures, build_ok, build_seconds
        try:
            kind, value = messages.get(block=block)
        except queue.Empty:
            return False
        if kind == "cli" and fixtures_cmd and fixtures is None:
            print(f"== fixtures, beside the build ({time.monotonic() - t0:.0f} s)", flush=True)
            fixtures = (subprocess.Popen(f"{fixtures_cmd} {shlex.quote(value)}", shell=True), time.monotonic())
        elif kind == "test":
            pending.append(value)
        elif kind == BUILD_DONE:
            build_ok, build_seconds = value, time.monotonic() - t0
            print(f"== build finished in {build_seconds:.0f} s" + ("" if value else ": FAILED"), flush=True)
        return True

    # the fixtures first, once cargo has built engine-cli (the reader thread takes cargo's
    # messages meanwhile, and while they are made)
    while fixtures_cmd and fixtures is None and build_ok is None:
        take(block=True)
    if fixtures_cmd and fixtures is None and build_ok:
        sys.exit("run-tests: the build made no engine-cli for the fixtures")
    if fixtures:
        status = fixtures[0].wait()
        print(f"== fixtures: {time.monotonic() - fixtures[1]:.0f} s" + ("" if status == 0 else ": FAILED"), flush=True)
        if status != 0:
            sys.exit("run-tests: the fixtures failed")
    # then each test binary as it comes: one at a time beside the build (which takes the cores
    # they leave), as many at once as the machine has cores once it has finished
    lock, done = threading.Lock(), queue.Queue()
    running = 0

    def run_into_done(binary):
        try:
            done.put((binary, run(binary, args, lock)))
        except Exception as error:  # a binary that cannot start counts as failed
            with lock:
                print(f"run-tests: {binary[2]}: {error}", flush=True)
            done.put((binary, (1, 0.0, 0.0, [])))

    def finish(block):
        nonlocal running
        try:
            binary, (status, seconds, cpu, times) = done.get(block=block, timeout=0.2 if block else None)
        except queue.Empty:
            return
        running -= 1
        per_binary.append((seconds, cpu, binary))
        per_test.extend(times)
        if status != 0:
            failed.append(binary)

    while build_ok is not False:
        while take(block=False):
            pass
        finish(block=False)
        width = 1 if build_ok is None else max(1, os.cpu_count() or 1)
        if pending and running < width:
            running += 1
            threading.Thread(target=run_into_done, args=(pending.pop(0),), daemon=True).start()
        elif running:
            finish(block=True)
        elif build_ok is None:
            take(block=True)
        else:
            break
    # a failed build starts nothing more, but the binaries already running finish
    while running:
        finish(block=True)
    if build_ok is False:
        sys.exit("run-tests: the build failed")
    if not per_binary:
        sys.exit("run-tests: cargo built no test executable")
    print("\n== time per test binary (wall, and the CPU time of it and the processes it started)")
    for seconds, cpu, (package, kind, name, _, _) in sorted(per_binary, key=lambda b: -b[0]):
        print(f"{seconds:8.1f} s {cpu:8.1f} CPU-s  {package} {kind} {name}")
    print("== the 10 slowest tests")
    for name, seconds in sorted(per_test, key=lambda t: -t[1])[:10]:
        print(f"{seconds:8.1f} s  {name}")
    wall, cpu = sum(b[0] for b in per_binary), sum(b[1] for b in per_binary)
    print(f"== {len(per_binary)} test binaries in {wall:.0f} s, {cpu:.0f} CPU-s; the build took {build_seconds:.0f} s,"
          f" all of it {time.monotonic() - t0:.0f} s")
    if failed:
        for package, kind, name, _, _ in failed:
            print(f"run-tests: FAILED: {package} {kind} {name}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
