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
