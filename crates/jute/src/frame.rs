//! Length-prefixed framing of the ZooKeeper client protocol.
//!
//! Every packet in both directions, including the initial connect handshake,
//! is a big-endian `i32` payload length followed by that many bytes.

use crate::codec::LENGTH_PREFIX_BYTES;
use crate::error::{JuteError, Result};

/// Largest payload accepted by default: ZooKeeper's `jute.maxbuffer`
/// default of `0xfffff` bytes (1 MiB - 1).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 0xfffff;

/// Bytes taken by the frame's length prefix.
pub const FRAME_HEADER_BYTES: usize = LENGTH_PREFIX_BYTES;

/// Inspects the start of `buf` for one complete frame.
///
/// Returns `Ok(None)` when more bytes are needed, `Ok(Some(n))` when the
/// first `n` bytes (prefix included) form a complete frame. A declared length
/// that is negative or larger than `max_frame_bytes` is an error as soon as
/// the prefix has arrived, so a peer cannot make us buffer an oversized frame.
pub fn check_frame(buf: &[u8], max_frame_bytes: usize) -> Result<Option<usize>> {
    let declared = match buf {
        [a, b, c, d, ..] => i32::from_be_bytes([*a, *b, *c, *d]),
        _ => return Ok(None),
    };
    let length = usize::try_from(declared).map_err(|_| JuteError::NegativeLength(declared))?;
    if length > max_frame_bytes {
        return Err(JuteError::FrameTooLong {
            length,
            max: max_frame_bytes,
        });
    }
    let total = FRAME_HEADER_BYTES + length;
    Ok((buf.len() >= total).then_some(total))
}

/// Splits one complete frame off the front of `buf`.
///
/// Returns the payload (without the prefix) and the total number of bytes the
/// frame occupies, or `Ok(None)` if the frame is not complete yet.
pub fn split_frame(buf: &[u8], max_frame_bytes: usize) -> Result<Option<(&[u8], usize)>> {
    let Some(total) = check_frame(buf, max_frame_bytes)? else {
        return Ok(None);
    };
    let payload = buf
        .get(FRAME_HEADER_BYTES..total)
        .ok_or(JuteError::Malformed("frame bounds out of range"))?;
    Ok(Some((payload, total)))
}

/// Appends one frame to `out`: reserves the length prefix, lets `body`
/// append the payload, then patches the prefix with the payload's length.
///
/// # Panics
/// If `body` appends more than `i32::MAX` bytes, which no valid frame can be.
pub fn write_frame(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
    body(out);
    let payload = out.len() - start - FRAME_HEADER_BYTES;
    let prefix = i32::try_from(payload)
        .expect("frame payload exceeds i32::MAX")
        .to_be_bytes();
    if let Some(slot) = out.get_mut(start..start + FRAME_HEADER_BYTES) {
        slot.copy_from_slice(&prefix);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_frame(&mut out, |o| o.extend_from_slice(payload));
        out
    }

    #[test]
    fn write_frame_patches_length() {
        let mut out = vec![9];
        write_frame(&mut out, |o| o.extend_from_slice(b"hello"));
        assert_eq!(out, [9, 0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o']);
    }

    #[test]
    fn incomplete_prefix_needs_more() {
        for len in 0..FRAME_HEADER_BYTES {
            assert_eq!(check_frame(&[0; 3][..len], 100), Ok(None));
        }
    }

    #[test]
    fn incomplete_payload_needs_more() {
        let frame = framed(b"abcdef");
        for cut in 0..frame.len() {
            assert_eq!(check_frame(&frame[..cut], 100), Ok(None), "cut {cut}");
        }
    }

    #[test]
    fn complete_frame_reports_total_length() {
        let mut frame = framed(b"abcdef");
        assert_eq!(check_frame(&frame, 100), Ok(Some(10)));
        frame.extend_from_slice(b"next frame bytes");
        assert_eq!(check_frame(&frame, 100), Ok(Some(10)));
        assert_eq!(split_frame(&frame, 100), Ok(Some((&b"abcdef"[..], 10))));
    }

    #[test]
    fn empty_payload_is_a_complete_frame() {
        assert_eq!(check_frame(&[0, 0, 0, 0], 100), Ok(Some(4)));
    }

    #[test]
    fn length_at_limit_is_accepted_above_is_rejected() {
        let at = 100i32.to_be_bytes();
        assert_eq!(check_frame(&at, 100), Ok(None));
        let above = 101i32.to_be_bytes();
        assert_eq!(
            check_frame(&above, 100),
            Err(JuteError::FrameTooLong {
                length: 101,
                max: 100
            })
        );
    }

    #[test]
    fn huge_length_is_rejected_from_prefix_alone() {
        let huge = i32::MAX.to_be_bytes();
        assert!(matches!(
            check_frame(&huge, DEFAULT_MAX_FRAME_BYTES),
            Err(JuteError::FrameTooLong { .. })
        ));
        // A four-letter word such as "ruok" reads as a huge length too.
        assert!(check_frame(b"ruok", DEFAULT_MAX_FRAME_BYTES).is_err());
    }

    #[test]
    fn negative_length_is_rejected() {
        assert_eq!(
            check_frame(&(-1i32).to_be_bytes(), 100),
            Err(JuteError::NegativeLength(-1))
        );
        assert_eq!(
            check_frame(&i32::MIN.to_be_bytes(), 100),
            Err(JuteError::NegativeLength(i32::MIN))
        );
    }
}
