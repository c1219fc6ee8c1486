#!/usr/bin/env python3
"""Makes the Whisper test fixtures in tests/fixtures/whisper/ with the reference
implementation, faster-whisper (CTranslate2), on the same weights the engine converts:

  clips/NAME.wav        16 kHz mono 16-bit speech: sentences spoken by espeak-ng (its 22,050 Hz
                        output converted by ffmpeg's resampler inside faster-whisper's decoder)
  clips/NAME.txt        the sentence
  NAME.mel              faster-whisper's log-mel spectrogram of the clip: u32 n_mels, u32
                        n_frames, then n_mels x n_frames little-endian f32 (a band's frames
                        contiguous)
  goldens.json          per model (whisper-tiny.en, whisper-base) and clip: the greedy token ids
                        of each segment (temperature 0, beam size 1, timestamps on, no previous
                        text), its text, and the whole transcript
  long-form.json        base (language en) on the espeak clips one after another with a second of
                        silence after each, twice, padded to 60 s (what tools/bench-whisper.py
                        times): faster-whisper's defaults (temperature fallback, each window
                        prompted with the text before it), every segment's seek and tokens
  speech-clips.json     the same for the recorded clips of `tools/fetch-models.sh speech-clips`
                        (pytest-audioeval's, 9 languages): tiny.en on the English ones, base on
                        every one with the language left to detect (the detected language kept)

    tools/make-whisper-goldens.py [--out tests/fixtures/whisper] [--keep-clips]

Needs espeak-ng (Debian) and network access to PyPI: faster-whisper and its dependencies are
installed into a private virtual environment under ~/.cache/engine-assets/ on first use (the
tests do not need them). The models come from tools/fetch-models.sh.
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("ENGINE_ASSETS", Path.home() / ".cache" / "engine-assets"))
VENV = CACHE / "whisper-goldens-venv"
REQUIREMENTS = ["faster-whisper==1.2.1", "ctranslate2==4.8.5", "numpy"]

SENTENCES = {
    "weather": "The weather today is sunny with a light breeze from the west.",
    "numbers": "Please call me back at five thirty, or send an email before Friday.",
    "science": "Photosynthesis converts light energy into chemical energy stored in sugar.",
    "question": "Where did you put the keys to the red car?",
    "story": "Once upon a time, a small fox lived at the edge of a quiet forest, "
             "and every morning it walked down to the river to drink.",
}
MODELS = ["whisper-tiny.en", "whisper-base"]


def in_venv() -> None:
    """Re-runs this script inside the private environment, creating it first."""
    python = VENV / "bin" / "python"
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    if not python.exists():
        venv.create(VENV, with_pip=True)
        subprocess.check_call([str(python), "-m", "pip", "install", "--quiet", *REQUIREMENTS])
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


def speak(text: str, wav: Path) -> None:
    subprocess.check_call(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(wav), text])


def write_wav16(path: Path, samples) -> None:
    import numpy as np

    pcm = np.clip(np.round(samples * 32768.0), -32768, 32767).astype("<i2").tobytes()
    header = b"RIFF" + struct.pack("<I", 36 + len(pcm)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
    path.write_bytes(header + b"data" + struct.pack("<I", len(pcm)) + pcm)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "whisper")
    p.add_argument("--keep-clips", action="store_true", help="leave the espeak clips, their mel frames and goldens.json as they are")
    a = p.parse_args()
    in_venv()
    speech_clips(a.out)
    if not a.keep_clips:
        espeak_clips(a.out)
    long_form(a.out)


def long_form(out: Path) -> None:
    import tempfile

    samples = b""
    for name in list(SENTENCES) * 2:
        samples += (out / "clips" / f"{name}.wav").read_bytes()[44:] + b"\0\0" * 16000
    samples += b"\0\0" * max(0, 60 * 16000 - len(samples) // 2)
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "long.wav"
        header = b"RIFF" + struct.pack("<I", 36 + len(samples)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
        wav.write_bytes(header + b"data" + struct.pack("<I", len(samples)) + samples)
        segments, _ = load("whisper-base").transcribe(str(wav), beam_size=1, condition_on_previous_text=True,
                                                       vad_filter=False, language="en")
        golden = {"whisper-base": [{"seek": s.seek, "start": s.start, "end": s.end, "temperature": s.temperature,
                                    "tokens": s.tokens, "text": s.text} for s in segments]}
    (out / "long-form.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


def load(model_name: str):
    from faster_whisper import WhisperModel

    gguf = subprocess.check_output(["bash", str(ROOT / "tools" / "fetch-models.sh"), model_name], text=True).strip()
    ct2_dir = Path(gguf).with_name(model_name + "-ct2")
    return WhisperModel(str(ct2_dir), device="cpu", compute_type="float32", cpu_threads=2)


def greedy(model, wav: Path, language):
    segments, info = model.transcribe(str(wav), beam_size=1, temperature=0.0, condition_on_previous_text=False,
                                      vad_filter=False, language=language)
    segments = list(segments)
    return {
        "language": info.language,
        "segments": [{"start": s.start, "end": s.end, "text": s.text, "tokens": s.tokens,
                      "avg_logprob": s.avg_logprob, "no_speech_prob": s.no_speech_prob,
                      "compression_ratio": s.compression_ratio, "temperature": s.temperature}
                     for s in segments],
        "text": "".join(s.text for s in segments).strip(),
    }


def speech_clips(out: Path) -> None:
    folder = Path(subprocess.check_output(["bash", str(ROOT / "tools" / "fetch-models.sh"), "speech-clips"],
                                          text=True).strip())
    clips = sorted(p.relative_to(folder).with_suffix("").as_posix() for p in folder.glob("*/*.wav"))
    goldens = {}
    for model_name in MODELS:
        model = load(model_name)
        english_only = model_name.endswith(".en")
        goldens[model_name] = {
            clip: {"reference": (folder / f"{clip}.txt").read_text().strip(), **greedy(model, folder / f"{clip}.wav", None)}
            for clip in clips if not english_only or clip.startswith("en/")
        }
    (out / "speech-clips.json").write_text(json.dumps(goldens, indent=1, ensure_ascii=False) + "\n")


def espeak_clips(out: Path) -> None:
    from faster_whisper.audio import decode_audio
    from faster_whisper.feature_extractor import FeatureExtractor

    clips = out / "clips"
    clips.mkdir(parents=True, exist_ok=True)
    tmp = out / "tmp.wav"
    for name, text in SENTENCES.items():
        speak(text, tmp)
        # to 16 kHz as faster-whisper reads any file, then stored as 16-bit PCM: both sides
        # then start from the same samples
        audio = decode_audio(str(tmp), sampling_rate=16000)
        write_wav16(clips / f"{name}.wav", audio)
        (clips / f"{name}.txt").write_text(text + "\n")
    tmp.unlink()

    extractor = FeatureExtractor(feature_size=80)
    for name in SENTENCES:
        audio = decode_audio(str(clips / f"{name}.wav"), sampling_rate=16000)
        mel = extractor(audio).astype("<f4")
        (out / f"{name}.mel").write_bytes(struct.pack("<II", *mel.shape) + mel.tobytes())

    goldens = {}
    for model_name in MODELS:
        model = load(model_name)
        goldens[model_name] = {name: greedy(model, clips / f"{name}.wav", None if model_name.endswith(".en") else "en")
                               for name in SENTENCES}
    (out / "goldens.json").write_text(json.dumps(goldens, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
