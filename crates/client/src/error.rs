//! The client's error type.

use crate::proto::{ErrorCode, JuteError};

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with a non-zero `ReplyHeader.err`.
    #[error("KeeperErrorCode = {}", .0.message())]
    Zk(ErrorCode),
    /// The server answered with an error code ZooKeeper does not define.
    #[error("unknown ZooKeeper error code {0}")]
    UnknownErrorCode(i32),
    /// The connection broke (or was closed) before the reply arrived.
    #[error("connection loss")]
    ConnectionLoss,
    /// The server refused to resume the session (connect reply with `time_out <= 0`).
    #[error("session expired")]
    SessionExpired,
    /// A socket error.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// A reply could not be decoded.
    #[error("decoding error: {0}")]
    Jute(#[from] JuteError),
    /// No reply arrived within the operation's timeout constant.
    #[error("operation timed out")]
    Timeout,
    /// The server sent a reply that does not fit the request (wrong xid or
    /// wrong response kind).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The connect string could not be parsed.
    #[error("invalid connect string: {0}")]
    InvalidAddress(String),
    /// TLS files that do not load, or a host name a certificate cannot name
    /// (boxed: it is large and rare).
    #[error("TLS: {0}")]
    Tls(Box<crate::tls::TlsError>),
}

impl From<crate::tls::TlsError> for ClientError {
    fn from(error: crate::tls::TlsError) -> ClientError {
        ClientError::Tls(Box::new(error))
    }
}

impl ClientError {
    /// Maps a non-zero reply error code to a `ClientError`.
    pub fn from_code(code: i32) -> ClientError {
        match ErrorCode::from_code(code) {
            Some(c) => ClientError::Zk(c),
            None => ClientError::UnknownErrorCode(code),
        }
    }

    /// The ZooKeeper error code this error corresponds to, if any
    /// (`ConnectionLoss`, `SessionExpired` and timeouts map to their codes).
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Zk(c) => Some(*c),
            ClientError::ConnectionLoss | ClientError::Io(_) => Some(ErrorCode::ConnectionLoss),
            ClientError::SessionExpired => Some(ErrorCode::SessionExpired),
            ClientError::Timeout => Some(ErrorCode::OperationTimeout),
            ClientError::Jute(_) => Some(ErrorCode::MarshallingError),
            _ => None,
        }
    }
}
