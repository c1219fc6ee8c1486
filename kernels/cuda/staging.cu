// A replayed step's uploads, carried to the device in one copy: the graph of a segment with
// several uploads copies its whole staging (the uploads' bytes, then a table of where each
// goes) into one buffer, `mirror`, and this kernel puts each upload in its own buffer, where
// the segment's launches read it (`src/steps.rs`).
#include "portable.cuh"

// Bytes of one entry of the table: the destination's address (8 bytes), then the upload's
// offset in the mirror and its length (4 bytes each).
#define STAGING_PIECE_BYTES 16

// Block b copies the upload of entry b of the table at byte `table_at` of the mirror. Offsets
// are multiples of 16 and destinations the starts of buffers, so whole 4-byte words move
// first, then the last bytes one at a time.
KERNEL void spread_staging(const uint8_t* mirror, int table_at) {
    const uint8_t* entry = mirror + table_at + (int64_t)BLOCK_ID * STAGING_PIECE_BYTES;
    uint8_t* to = (uint8_t*)*(const uint64_t*)entry;
    const uint8_t* from = mirror + *(const uint32_t*)(entry + 8);
    const uint32_t bytes = *(const uint32_t*)(entry + 12);
    const uint32_t words = bytes / 4;
    for (uint32_t i = THREAD_ID; i < words; i += BLOCK_THREADS) {
        ((uint32_t*)to)[i] = load_u32_a4(from + 4 * i);
    }
    for (uint32_t i = words * 4 + THREAD_ID; i < bytes; i += BLOCK_THREADS) {
        to[i] = from[i];
    }
}
