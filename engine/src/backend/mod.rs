//! Compute backends. The CPU backend is always built.

pub mod cpu;
