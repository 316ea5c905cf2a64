//! Transactions: what the leader puts in the Raft log and every node applies.
//!
//! A client write is stored as the jute body the client sent (decoded again
//! at apply time, which is cheap) plus the context ZooKeeper's prep stage
//! would have used: session, xid, wall time stamped by the proposer and the
//! connection's authenticated ids (needed for ACL checks at apply time).

use keel_jute::{Id, JuteError, Reader, Record};

/// Most auth ids a connection may carry into a transaction.
pub const AUTH_IDS_MAX: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOp {
    /// A client write request: its opcode and its jute body.
    Request {
        op_code: i32,
        body: Vec<u8>,
    },
    CreateSession {
        timeout_ms: u32,
    },
    /// Closes the session (client closeSession or expiry): its ephemerals go.
    CloseSession,
    /// The container/TTL reaper's delete (ZooKeeper's deleteContainer).
    DeleteContainer {
        path: String,
    },
    /// sync: ordered through the log, changes nothing, takes no zxid.
    Sync {
        path: String,
    },
    /// A Keel KV operation (`keel_kv::Op`, opaque here): applied by the
    /// server's keyspace, not by the tree; takes no zxid. The session id
    /// field carries the KV connection's id.
    Kv {
        body: Vec<u8>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    pub session_id: i64,
    pub xid: i32,
    pub time_ms: i64,
    pub auth: Vec<Id>,
    pub op: TxnOp,
}

const TAG_REQUEST: i32 = 1;
const TAG_CREATE_SESSION: i32 = 2;
const TAG_CLOSE_SESSION: i32 = 3;
const TAG_DELETE_CONTAINER: i32 = 4;
const TAG_SYNC: i32 = 5;
const TAG_KV: i32 = 6;

impl Txn {
    pub fn write(&self, out: &mut Vec<u8>) {
        assert!(self.auth.len() <= AUTH_IDS_MAX);
        keel_jute::write_i64(out, self.session_id);
        keel_jute::write_i32(out, self.xid);
        keel_jute::write_i64(out, self.time_ms);
        keel_jute::write_i32(out, self.auth.len() as i32);
        for id in &self.auth {
            id.write(out);
        }
        match &self.op {
            TxnOp::Request { op_code, body } => {
                keel_jute::write_i32(out, TAG_REQUEST);
                keel_jute::write_i32(out, *op_code);
                keel_jute::write_buffer(out, Some(body));
            }
            TxnOp::CreateSession { timeout_ms } => {
                keel_jute::write_i32(out, TAG_CREATE_SESSION);
                keel_jute::write_i32(out, *timeout_ms as i32);
            }
            TxnOp::CloseSession => keel_jute::write_i32(out, TAG_CLOSE_SESSION),
            TxnOp::DeleteContainer { path } => {
                keel_jute::write_i32(out, TAG_DELETE_CONTAINER);
                keel_jute::write_string(out, path);
            }
            TxnOp::Sync { path } => {
                keel_jute::write_i32(out, TAG_SYNC);
                keel_jute::write_string(out, path);
            }
            TxnOp::Kv { body } => {
                keel_jute::write_i32(out, TAG_KV);
                keel_jute::write_buffer(out, Some(body));
            }
        }
    }

    pub fn read(r: &mut Reader<'_>) -> Result<Txn, JuteError> {
        let session_id = r.read_i64()?;
        let xid = r.read_i32()?;
        let time_ms = r.read_i64()?;
        let auth_len = r.read_i32()?;
        if auth_len < 0 || auth_len as usize > AUTH_IDS_MAX {
            return Err(JuteError::Malformed("txn auth id count"));
        }
        let mut auth = Vec::with_capacity(auth_len as usize);
        for _ in 0..auth_len {
            auth.push(Id::read(r)?);
        }
        let op = match r.read_i32()? {
            TAG_REQUEST => {
                let op_code = r.read_i32()?;
                let body = r.read_buffer()?.unwrap_or_default();
                TxnOp::Request { op_code, body }
            }
            TAG_CREATE_SESSION => TxnOp::CreateSession {
                timeout_ms: r.read_i32()? as u32,
            },
            TAG_CLOSE_SESSION => TxnOp::CloseSession,
            TAG_DELETE_CONTAINER => TxnOp::DeleteContainer {
                path: r.read_string()?,
            },
            TAG_SYNC => TxnOp::Sync {
                path: r.read_string()?,
            },
            TAG_KV => TxnOp::Kv {
                body: r.read_buffer()?.unwrap_or_default(),
            },
            tag => return Err(JuteError::UnknownTag { what: "txn", tag }),
        };
        Ok(Txn {
            session_id,
            xid,
            time_ms,
            auth,
            op,
        })
    }
}

impl Txn {
    /// The bytes consensus carries for this transaction (a proposal's
    /// payload, opaque to it).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.body_bytes());
        self.write(&mut out);
        out
    }

    /// Decodes a payload whole: trailing bytes are an error.
    pub fn decode(bytes: &[u8]) -> Result<Txn, JuteError> {
        let mut r = Reader::new(bytes);
        let txn = Txn::read(&mut r)?;
        if r.remaining() != 0 {
            return Err(JuteError::Malformed("txn trailing bytes"));
        }
        Ok(txn)
    }

    fn body_bytes(&self) -> usize {
        match &self.op {
            TxnOp::Request { body, .. } | TxnOp::Kv { body } => body.len(),
            TxnOp::DeleteContainer { path } | TxnOp::Sync { path } => path.len(),
            TxnOp::CreateSession { .. } | TxnOp::CloseSession => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_and_every_cut_is_refused() {
        let txns = vec![
            Txn {
                session_id: 7,
                xid: 3,
                time_ms: 1000,
                auth: vec![Id {
                    scheme: "digest".into(),
                    id: "u:h".into(),
                }],
                op: TxnOp::Request {
                    op_code: 1,
                    body: vec![1, 2, 3],
                },
            },
            Txn {
                session_id: 7,
                xid: 0,
                time_ms: 0,
                auth: vec![],
                op: TxnOp::CreateSession { timeout_ms: 4000 },
            },
            Txn {
                session_id: 7,
                xid: 0,
                time_ms: 0,
                auth: vec![],
                op: TxnOp::CloseSession,
            },
            Txn {
                session_id: 0,
                xid: 0,
                time_ms: 5,
                auth: vec![],
                op: TxnOp::DeleteContainer { path: "/c".into() },
            },
            Txn {
                session_id: 7,
                xid: 9,
                time_ms: 5,
                auth: vec![],
                op: TxnOp::Sync { path: "/".into() },
            },
            Txn {
                session_id: 3,
                xid: 0,
                time_ms: 6,
                auth: vec![],
                op: TxnOp::Kv {
                    body: vec![1, 2, 3],
                },
            },
        ];
        for txn in &txns {
            let bytes = txn.encode();
            assert_eq!(&Txn::decode(&bytes).unwrap(), txn);
            for cut in 0..bytes.len() {
                assert!(Txn::decode(&bytes[..cut]).is_err(), "cut at {cut}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(Txn::decode(&longer).is_err(), "trailing byte accepted");
        }
    }
}
