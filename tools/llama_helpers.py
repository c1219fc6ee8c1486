"""Builds the small C++ programs of tools/src/ against the llama.cpp build the goldens come from
(../shared/tools/build-llama-cpp.sh, b11434), next to its binaries; the golden scripts import it.
"""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def llama_bin() -> str:
    """The folder of llama.cpp's binaries (../shared/tools/build-llama-cpp.sh builds them once)."""
    tools = os.path.join(ROOT, "..", "shared", "tools")
    return subprocess.run([os.path.join(tools, "build-llama-cpp.sh")], check=True, capture_output=True,
                          text=True).stdout.strip()


def build_helper(name: str) -> str:
    """The path of tools/src/NAME.cpp built against libllama (rebuilt when the source is newer)."""
    bin_dir = llama_bin()
    llama = os.path.dirname(os.path.realpath(os.path.join(bin_dir, "llama-cli")))
    llama = os.path.dirname(os.path.dirname(llama))  # .../llama.cpp-b11434
    src, build = os.path.join(llama, "src"), os.path.join(llama, "build")
    exe = os.path.join(llama, "bin", name)
    source = os.path.join(ROOT, "tools", "src", f"{name}.cpp")
    if not os.path.exists(exe) or os.path.getmtime(source) > os.path.getmtime(exe):
        libs = [os.path.join(build, "src", "libllama.a")]
        ggml = os.path.join(build, "ggml", "src")
        libs += sorted(os.path.join(ggml, f) for f in os.listdir(ggml) if f.startswith("libggml") and f.endswith(".a"))
        subprocess.run(["g++", "-O2", "-std=c++17", source, "-I" + os.path.join(src, "include"),
                        "-I" + os.path.join(src, "ggml", "include"), "-I" + os.path.join(src, "src"),
                        "-Wl,--start-group", *libs, "-Wl,--end-group", "-fopenmp", "-lpthread", "-ldl", "-o", exe],
                       check=True)
    return exe


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, path: str, body: dict, timeout: float = 300) -> dict:
    """POST `body` as JSON to the llama-server on `port`; its JSON answer."""
    import json
    import urllib.request
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def start_server(model: str, *flags: str) -> tuple:
    """llama-server on `model` with `flags` on a free port, once `/health` answers 200:
    (the process, its port). The caller terminates it."""
    import sys
    import time
    import urllib.request
    port = free_port()
    server = subprocess.Popen([os.path.join(llama_bin(), "llama-server"), "-m", model, "--port", str(port), *flags],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(240):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return server, port
        except OSError:
            time.sleep(0.5)
    server.terminate()
    sys.exit("llama-server did not start")
