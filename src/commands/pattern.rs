//! The data written to GPU memory by `demo` and the GPU test target: a
//! splitmix64 stream keyed by seed and byte offset, so any chunk can be
//! regenerated alone, no two chunks are alike, and a restore that brings
//! back the wrong bytes (or none) shows up in the hash.

use xxhash_rust::xxh3::Xxh3;

use crate::driver::{CallError, DeviceBuffer};

/// How much is filled or checked per copy.
pub const CHUNK: usize = 64 << 20;

/// Fills `buffer` with the pattern for bytes `offset..` of stream `seed`.
pub fn fill_pattern(seed: u64, offset: u64, buffer: &mut [u8]) {
    for (i, word) in buffer.chunks_mut(8).enumerate() {
        let mut z = (seed ^ (offset / 8 + i as u64)).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        word.copy_from_slice(&z.to_le_bytes()[..word.len()]);
    }
}

/// Writes the pattern over the whole buffer, chunk by chunk; returns its hash.
pub fn write_pattern(buffer: &DeviceBuffer<'_>, seed: u64) -> Result<u64, CallError> {
    let mut hasher = Xxh3::new();
    let mut chunk = vec![0u8; CHUNK.min(buffer.len())];
    let mut offset = 0;
    while offset < buffer.len() {
        let len = CHUNK.min(buffer.len() - offset);
        fill_pattern(seed, offset as u64, &mut chunk[..len]);
        hasher.update(&chunk[..len]);
        buffer.write(offset, &chunk[..len])?;
        offset += len;
    }
    Ok(hasher.digest())
}

/// Reads the whole buffer back and hashes it.
pub fn hash_device(buffer: &DeviceBuffer<'_>) -> Result<u64, CallError> {
    let mut hasher = Xxh3::new();
    let mut chunk = vec![0u8; CHUNK.min(buffer.len())];
    let mut offset = 0;
    while offset < buffer.len() {
        let len = CHUNK.min(buffer.len() - offset);
        buffer.read(offset, &mut chunk[..len])?;
        hasher.update(&chunk[..len]);
        offset += len;
    }
    Ok(hasher.digest())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_is_positional_and_varied() {
        let mut whole = vec![0u8; 64];
        fill_pattern(7, 0, &mut whole);
        let mut tail = vec![0u8; 32];
        fill_pattern(7, 32, &mut tail);
        assert_eq!(&whole[32..], &tail[..]);
        assert_ne!(&whole[..8], &whole[8..16]);
        let mut other_seed = vec![0u8; 64];
        fill_pattern(8, 0, &mut other_seed);
        assert_ne!(whole, other_seed);
    }
}
