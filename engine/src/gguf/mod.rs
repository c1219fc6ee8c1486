//! GGUF files: memory-mapped reader, value types and writer.
