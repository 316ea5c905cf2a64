//! The single error type returned by every decoding routine in this crate.

use thiserror::Error;

/// Why a byte sequence could not be decoded as a Jute record or frame.
///
/// Decoding never panics and never allocates more than the input could
/// possibly describe: any of these errors is the only outcome of hostile or
/// corrupt input. A server should treat all of them as fatal for the
/// connection (ZooKeeper closes the socket on a malformed packet).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum JuteError {
    /// The input ended before a field was complete.
    #[error("truncated input: needed {needed} bytes, {remaining} remaining")]
    Truncated {
        /// Bytes the field being decoded required.
        needed: usize,
        /// Bytes that were left in the input.
        remaining: usize,
    },
    /// A length prefix was negative (and not the `-1` that encodes null).
    #[error("negative length {0}")]
    NegativeLength(i32),
    /// A frame declared a payload longer than the configured maximum.
    #[error("frame length {length} exceeds maximum {max}")]
    FrameTooLong {
        /// Declared payload length.
        length: usize,
        /// Configured limit (ZooKeeper's `jute.maxbuffer`).
        max: usize,
    },
    /// A `ustring` field was not valid UTF-8.
    #[error("string is not valid UTF-8")]
    InvalidUtf8,
    /// An operation code that this codec does not know how to decode.
    #[error("unknown op code {0}")]
    UnknownOpCode(i32),
    /// A multi holding an op of a type this codec does not know: a
    /// malformed request to a server (MarshallingError, as ZooKeeper's),
    /// an op of a newer release in a committed transaction.
    #[error("unknown op code {0} in multi")]
    UnknownOpInMulti(i32),
    /// A tagged union's tag this codec does not know (`what` names the
    /// union: a Keel transaction's kind).
    #[error("unknown {what} tag {tag}")]
    UnknownTag {
        /// The union whose tag it is.
        what: &'static str,
        /// The tag read.
        tag: i32,
    },
    /// A vector claimed more elements than the remaining bytes could hold.
    #[error("vector of {0} elements cannot fit in the remaining input")]
    VectorTooLong(usize),
    /// Structurally invalid input that is not covered by another variant.
    #[error("malformed input: {0}")]
    Malformed(&'static str),
}

/// Shorthand used throughout the crate.
pub type Result<T, E = JuteError> = std::result::Result<T, E>;
