#!/usr/bin/env python3
"""Real-time factor of `engine-cli transcribe` beside faster-whisper (CTranslate2) on the same
clip, weights and threads, in alternating rounds: seconds of computing per second of audio
(lower is faster), the median of the rounds, each side's model load included once per round.

    tools/bench-whisper.py [--threads 2] [--rounds 3] [--models whisper-tiny.en,whisper-base]

The clip is the five clips of tests/fixtures/whisper one after another with a second of silence
after each, twice, padded to 60 s. faster-whisper runs from the private environment
tools/make-whisper-goldens.py makes (float32 compute, as the engine's f16 weights are used;
greedy, timestamps on). Times target/release/engine-cli (`cargo build --release -p cli`) unless
--cli names another build.
"""

import argparse
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLIPS = ["weather", "numbers", "science", "question", "story"]
VENV_PY = Path(os.environ.get("ENGINE_ASSETS", Path.home() / ".cache" / "engine-assets")) / "whisper-goldens-venv" / "bin" / "python"

FASTER_WHISPER = """
import sys, time
from faster_whisper import WhisperModel
model_dir, clip, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
start = time.perf_counter()
model = WhisperModel(model_dir, device="cpu", compute_type="float32", cpu_threads=threads)
segments, info = model.transcribe(clip, beam_size=1, condition_on_previous_text=True, vad_filter=False,
                                  language="en")
text = "".join(s.text for s in segments)
print(time.perf_counter() - start)
print(text.strip())
"""


def sixty_seconds(path: Path) -> float:
    samples = b""
    for name in CLIPS + CLIPS:
        data = (ROOT / "tests/fixtures/whisper/clips" / f"{name}.wav").read_bytes()[44:]
        samples += data + b"\0\0" * 16000
    samples += b"\0\0" * max(0, 60 * 16000 - len(samples) // 2)
    header = b"RIFF" + struct.pack("<I", 36 + len(samples)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
    path.write_bytes(header + b"data" + struct.pack("<I", len(samples)) + samples)
    return len(samples) / 2 / 16000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--models", default="whisper-tiny.en,whisper-base")
    p.add_argument("--cli", type=Path, default=ROOT / "target/release/engine-cli", help="the engine-cli binary to time")
    a = p.parse_args()
    cli = a.cli
    if not cli.exists():
        sys.exit("build it first: cargo build --release -p cli")
    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "sixty.wav"
        seconds = sixty_seconds(clip)
        for name in a.models.split(","):
            gguf = subprocess.check_output(["bash", str(ROOT / "tools/fetch-models.sh"), name], text=True).strip()
            ct2 = str(Path(gguf).with_name(name + "-ct2"))
            ours, theirs = [], []
            for _ in range(a.rounds):
                start = time.perf_counter()
                out = subprocess.run([str(cli), "transcribe", "-t", str(a.threads), "--language", "en", "-m", gguf, str(clip)],
                                     capture_output=True, text=True, check=True)
                ours.append(time.perf_counter() - start)
                our_text = out.stdout.strip()
                out = subprocess.run([str(VENV_PY), "-c", FASTER_WHISPER, ct2, str(clip), str(a.threads)],
                                     capture_output=True, text=True, check=True)
                theirs.append(float(out.stdout.splitlines()[0]))
                their_text = "\n".join(out.stdout.splitlines()[1:])
            o, t = statistics.median(ours), statistics.median(theirs)
            print(f"{name}: {seconds:.0f} s of audio, {a.threads} threads: engine {o:.2f} s (RTF {o / seconds:.3f}), "
                  f"faster-whisper {t:.2f} s (RTF {t / seconds:.3f}); engine / faster-whisper {o / t:.2f}")
            print(f"  engine:         {our_text[:100]}...")
            print(f"  faster-whisper: {their_text[:100]}...")


if __name__ == "__main__":
    main()
