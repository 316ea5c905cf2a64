//! The request bodies ClickHouse Keeper adds to ZooKeeper's protocol
//! (op codes 500–503, see [`crate::opcode`]), laid out as ClickHouse's
//! serializer writes them (`src/Common/ZooKeeper/ZooKeeperCommon.cpp`):
//! integers big-endian, a `bool` and a `uint8_t` one byte each, strings
//! with an `int` length.
//!
//! The other two extensions reuse ZooKeeper records: `checkNotExists` (501)
//! is a [`crate::CheckVersionRequest`] and `createIfNotExists` (502) a
//! [`crate::CreateRequest`].

use crate::codec::{write_bool, write_i32, write_string, Reader, Record};
use crate::consts::opcode;
use crate::error::{JuteError, Result};
use crate::message::{MultiOp, MultiResult};

/// Which children a `filteredList` returns (ClickHouse's `ListRequestType`,
/// one byte on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum ListRequestType {
    /// Every child, as getChildren2.
    #[default]
    All = 0,
    /// Children that are not ephemeral.
    PersistentOnly = 1,
    /// Ephemeral children only.
    EphemeralOnly = 2,
}

impl ListRequestType {
    /// The byte on the wire.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The type a wire byte names; `None` for a value ClickHouse never sends.
    pub fn from_u8(value: u8) -> Option<Self> {
        match value {
            0 => Some(Self::All),
            1 => Some(Self::PersistentOnly),
            2 => Some(Self::EphemeralOnly),
            _ => None,
        }
    }
}

/// `filteredList` (500): a getChildren request (path, watch) followed by a
/// one-byte [`ListRequestType`]. Answered like getChildren2 (names + Stat).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FilteredListRequest {
    /// The znode whose children are listed.
    pub path: String,
    /// Leave a child watch on `path`.
    pub watch: bool,
    /// Which children to list.
    pub list_type: ListRequestType,
}

impl Record for FilteredListRequest {
    fn write(&self, out: &mut Vec<u8>) {
        write_string(out, &self.path);
        write_bool(out, self.watch);
        out.push(self.list_type.code());
    }

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let path = r.read_string()?;
        let watch = r.read_bool()?;
        let byte = r.read_bytes(1)?[0];
        let list_type =
            ListRequestType::from_u8(byte).ok_or(JuteError::Malformed("unknown list type"))?;
        Ok(Self {
            path,
            watch,
            list_type,
        })
    }
}

/// `removeRecursive` (503): the subtree's root and the most znodes the
/// request may delete (ClickHouse's `uint32_t remove_nodes_limit`, four
/// bytes big-endian). A subtree larger than the limit is not touched.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemoveRecursiveRequest {
    /// Root of the subtree to delete.
    pub path: String,
    /// Most znodes (the root included) the request may delete.
    pub remove_nodes_limit: u32,
}

impl Record for RemoveRecursiveRequest {
    fn write(&self, out: &mut Vec<u8>) {
        write_string(out, &self.path);
        write_i32(out, self.remove_nodes_limit as i32);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            path: r.read_string()?,
            remove_nodes_limit: r.read_i32()? as u32,
        })
    }
}

/// The op code ClickHouse Keeper writes in the `MultiHeader` of a reply to
/// a multiRead op with this request op code: its response classes report
/// their own op, and a filteredList is answered by a list response (12).
pub fn multi_read_reply_op(request_op: i32) -> i32 {
    match request_op {
        opcode::FILTERED_LIST => opcode::GET_CHILDREN2,
        other => other,
    }
}

/// Rewrites a multiRead's failed results from ZooKeeper's form (type -1
/// and an `ErrorResponse` body) into ClickHouse Keeper's (the op's own
/// reply type, no body), which ClickHouse's client needs: it casts every
/// sub-response of a multiRead to the type of its request.
pub fn to_clickhouse_failures(ops: &[MultiOp], results: &mut [MultiResult]) {
    assert_eq!(ops.len(), results.len(), "one result per op");
    for (op, result) in ops.iter().zip(results.iter_mut()) {
        if let MultiResult::Error(err) = *result {
            if err != 0 {
                *result = MultiResult::Failed {
                    op: multi_read_reply_op(op.op_code()),
                    err,
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filtered_list_wire_form_and_unknown_types() {
        let request = FilteredListRequest {
            path: "/a".into(),
            watch: true,
            list_type: ListRequestType::EphemeralOnly,
        };
        let bytes = request.to_bytes();
        assert_eq!(bytes, [0, 0, 0, 2, b'/', b'a', 1, 2]);
        assert_eq!(FilteredListRequest::from_bytes(&bytes), Ok(request));
        let mut bad = bytes.clone();
        bad[7] = 3;
        assert_eq!(
            FilteredListRequest::from_bytes(&bad),
            Err(JuteError::Malformed("unknown list type"))
        );
        assert!(FilteredListRequest::from_bytes(&bytes[..7]).is_err());
    }

    #[test]
    fn remove_recursive_limit_is_unsigned() {
        let request = RemoveRecursiveRequest {
            path: "/a".into(),
            remove_nodes_limit: u32::MAX,
        };
        let bytes = request.to_bytes();
        assert_eq!(bytes, [0, 0, 0, 2, b'/', b'a', 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(RemoveRecursiveRequest::from_bytes(&bytes), Ok(request));
    }

    #[test]
    fn multi_read_reply_ops() {
        assert_eq!(multi_read_reply_op(opcode::FILTERED_LIST), 12);
        assert_eq!(multi_read_reply_op(opcode::GET_DATA), 4);
        assert_eq!(multi_read_reply_op(opcode::EXISTS), 3);
    }
}
