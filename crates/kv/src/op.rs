//! What a KV write puts in the Raft log: the command's raw arguments
//! (parsed again when applied, which is cheap and keeps one source of
//! truth), a transaction's commands with its WATCH tokens, or the
//! leader's deletion of expired keys. Every replica applies the same
//! bytes at the same index with the same clock, so every replica decides
//! alike.
//!
//! Encoding (big-endian): `[kind u8]` then
//! - COMMAND: `[seq u64][args]`
//! - EXEC: `[seq u64][watches u32]{[token u64][watched_ms i64][key]}[commands u32]{[args]}`
//! - EXPIRE: `[keys u32]{[key]}`
//! - COMMANDS: `[first_seq u64][commands u32]{[args]}`: commands one
//!   connection pipelined, numbered `first_seq`, `first_seq + 1`, ...
//!   (at most `PIPELINE_COMMANDS_MAX`); applied one after another as the
//!   COMMANDs they stand for, each with its own write stamp. One proposal
//!   for the lot: the Txn around it, consensus's framing, its decoding
//!   and the reply's route are paid once, not per command.
//!
//! where `[args]` is `[count u32]{[len u32][bytes]}` and `[key]` is
//! `[len u32][bytes]`. `seq` numbers the request on its connection (the
//! reply finds its place in the connection's queue by it).

use crate::resp::Args;

const KIND_COMMAND: u8 = 1;
const KIND_EXEC: u8 = 2;
const KIND_EXPIRE: u8 = 3;
const KIND_COMMANDS: u8 = 4;

/// Commands one COMMANDS batch carries at most. An entry holds at most
/// consensus's `BATCH_PROPOSALS_MAX` proposals, and every operation in it
/// takes a write stamp ordinal (`shard::STAMP_ORDINALS_MAX` per entry):
/// the server asserts that their product fits.
pub const PIPELINE_COMMANDS_MAX: usize = 16;

/// A key watched by a transaction: the log index the watching read saw it
/// at, and that read's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    pub key: Vec<u8>,
    pub token: u64,
    pub watched_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Command {
        seq: u64,
        args: Args,
    },
    Exec {
        seq: u64,
        watches: Vec<Watch>,
        commands: Vec<Args>,
    },
    /// Keys the leader found expired: each goes if it is still expired at
    /// the entry's clock.
    Expire {
        keys: Vec<Vec<u8>>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    #[error("KV operation truncated at byte {0}")]
    Truncated(usize),
    #[error("unknown KV operation kind {0}")]
    Kind(u8),
    #[error("KV operation has {0} trailing bytes")]
    Trailing(usize),
    #[error("KV command batch of {0} commands")]
    Count(usize),
}

fn put_u32(out: &mut Vec<u8>, value: usize) {
    out.extend_from_slice(&u32::try_from(value).expect("fits in u32").to_be_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u32(out, bytes.len());
    out.extend_from_slice(bytes);
}

fn put_args(out: &mut Vec<u8>, args: &[Vec<u8>]) {
    put_u32(out, args.len());
    for arg in args {
        put_bytes(out, arg);
    }
}

/// Bytes `encode` will write for `args` (sizing checks before proposing).
pub fn args_bytes(args: &[Vec<u8>]) -> usize {
    4 + args.iter().map(|a| 4 + a.len()).sum::<usize>()
}

/// Bytes of a COMMANDS batch of `commands`.
pub fn commands_bytes<'a>(commands: impl IntoIterator<Item = &'a Args>) -> usize {
    1 + 8 + 4 + commands.into_iter().map(|c| args_bytes(c)).sum::<usize>()
}

impl Op {
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Op::Command { seq, args } => {
                out.push(KIND_COMMAND);
                out.extend_from_slice(&seq.to_be_bytes());
                put_args(out, args);
            }
            Op::Exec {
                seq,
                watches,
                commands,
            } => {
                out.push(KIND_EXEC);
                out.extend_from_slice(&seq.to_be_bytes());
                put_u32(out, watches.len());
                for watch in watches {
                    out.extend_from_slice(&watch.token.to_be_bytes());
                    out.extend_from_slice(&watch.watched_ms.to_be_bytes());
                    put_bytes(out, &watch.key);
                }
                put_u32(out, commands.len());
                for args in commands {
                    put_args(out, args);
                }
            }
            Op::Expire { keys } => {
                out.push(KIND_EXPIRE);
                put_u32(out, keys.len());
                for key in keys {
                    put_bytes(out, key);
                }
            }
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_bytes());
        self.encode(&mut out);
        out
    }

    /// Bytes `encode` writes (so the buffer is allocated once).
    pub fn encoded_bytes(&self) -> usize {
        match self {
            Op::Command { args, .. } => 1 + 8 + args_bytes(args),
            Op::Exec {
                watches, commands, ..
            } => {
                let watches: usize = watches.iter().map(|w| 8 + 8 + 4 + w.key.len()).sum();
                let commands: usize = commands.iter().map(|c| args_bytes(c)).sum();
                1 + 8 + 4 + watches + 4 + commands
            }
            Op::Expire { keys } => 1 + 4 + keys.iter().map(|k| 4 + k.len()).sum::<usize>(),
        }
    }

    /// The COMMANDS batch of `commands`, numbered from `first_seq`: 2 to
    /// `PIPELINE_COMMANDS_MAX` of them (one alone is a COMMAND).
    pub fn commands_to_bytes(first_seq: u64, commands: &[Args]) -> Vec<u8> {
        assert!(commands.len() >= 2, "one command is a COMMAND");
        assert!(commands.len() <= PIPELINE_COMMANDS_MAX);
        let mut out = Vec::with_capacity(commands_bytes(commands.iter()));
        out.push(KIND_COMMANDS);
        out.extend_from_slice(&first_seq.to_be_bytes());
        put_u32(&mut out, commands.len());
        for args in commands {
            put_args(&mut out, args);
        }
        out
    }

    /// Whether `bytes` is a COMMANDS batch (`decode_all` decodes it; a
    /// single operation `decode` does, with no list around it).
    pub fn is_batch(bytes: &[u8]) -> bool {
        bytes.first() == Some(&KIND_COMMANDS)
    }

    /// Decodes a proposal's operations: a COMMANDS batch gives its
    /// commands (as COMMANDs, in order), anything else the one operation.
    /// All or nothing: a malformed batch gives an error, no command.
    pub fn decode_all(bytes: &[u8]) -> Result<Vec<Op>, OpError> {
        if !Op::is_batch(bytes) {
            return Ok(vec![Op::decode(bytes)?]);
        }
        let mut r = Reader { bytes, at: 1 };
        let mut first_seq = r.u64()?;
        if crate::planted::batch_seq_shifted() {
            first_seq = first_seq.wrapping_add(1);
        }
        let count = r.count(4)?;
        if !(2..=PIPELINE_COMMANDS_MAX).contains(&count) {
            return Err(OpError::Count(count));
        }
        let end_seq = first_seq
            .checked_add(count as u64)
            .ok_or(OpError::Count(count))?;
        let mut ops = Vec::with_capacity(count);
        for seq in first_seq..end_seq {
            ops.push(Op::Command {
                seq,
                args: r.args()?,
            });
        }
        if r.at != bytes.len() {
            return Err(OpError::Trailing(bytes.len() - r.at));
        }
        Ok(ops)
    }

    /// Decodes a whole operation; anything malformed is an error.
    pub fn decode(bytes: &[u8]) -> Result<Op, OpError> {
        let mut r = Reader { bytes, at: 0 };
        let op = match r.u8()? {
            KIND_COMMAND => Op::Command {
                seq: r.u64()?,
                args: r.args()?,
            },
            KIND_EXEC => {
                let seq = r.u64()?;
                let count = r.count(20)?;
                let mut watches = Vec::with_capacity(count);
                for _ in 0..count {
                    watches.push(Watch {
                        token: r.u64()?,
                        watched_ms: r.u64()? as i64,
                        key: r.bytes()?.to_vec(),
                    });
                }
                let count = r.count(4)?;
                let mut commands = Vec::with_capacity(count);
                for _ in 0..count {
                    commands.push(r.args()?);
                }
                Op::Exec {
                    seq,
                    watches,
                    commands,
                }
            }
            KIND_EXPIRE => {
                let count = r.count(4)?;
                let mut keys = Vec::with_capacity(count);
                for _ in 0..count {
                    keys.push(r.bytes()?.to_vec());
                }
                Op::Expire { keys }
            }
            other => return Err(OpError::Kind(other)),
        };
        if r.at != bytes.len() {
            return Err(OpError::Trailing(bytes.len() - r.at));
        }
        Ok(op)
    }

    /// The request sequence of the connection that asked (none for the
    /// leader's own expiry).
    pub fn seq(&self) -> Option<u64> {
        match self {
            Op::Command { seq, .. } | Op::Exec { seq, .. } => Some(*seq),
            Op::Expire { .. } => None,
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], OpError> {
        let end = self.at.checked_add(len).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or(OpError::Truncated(self.at))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn u8(&mut self) -> Result<u8, OpError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<usize, OpError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize)
    }

    fn u64(&mut self) -> Result<u64, OpError> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    /// A count of items of at least `item_bytes` each: one the remaining
    /// bytes cannot hold is refused before anything is allocated.
    fn count(&mut self, item_bytes: usize) -> Result<usize, OpError> {
        let count = self.u32()?;
        if count.saturating_mul(item_bytes) > self.bytes.len() - self.at {
            return Err(OpError::Truncated(self.at));
        }
        Ok(count)
    }

    fn bytes(&mut self) -> Result<&'a [u8], OpError> {
        let len = self.u32()?;
        self.take(len)
    }

    fn args(&mut self) -> Result<Args, OpError> {
        let count = self.count(4)?;
        let mut args = Vec::with_capacity(count);
        for _ in 0..count {
            args.push(self.bytes()?.to_vec());
        }
        Ok(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Args {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn every_kind_round_trips_and_every_cut_is_refused() {
        let ops = [
            Op::Command {
                seq: 9,
                args: args(&["SET", "k", "v"]),
            },
            Op::Exec {
                seq: 3,
                watches: vec![Watch {
                    key: b"w".to_vec(),
                    token: 17,
                    watched_ms: -5,
                }],
                commands: vec![args(&["INCR", "a"]), args(&["GET", "b"])],
            },
            Op::Expire {
                keys: vec![b"x".to_vec(), b"".to_vec()],
            },
        ];
        for op in &ops {
            let bytes = op.to_bytes();
            assert_eq!(Op::decode(&bytes).as_ref(), Ok(op));
            for cut in 0..bytes.len() {
                assert!(Op::decode(&bytes[..cut]).is_err(), "{op:?} cut at {cut}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(Op::decode(&longer), Err(OpError::Trailing(1)));
        }
        assert_eq!(Op::decode(&[9]), Err(OpError::Kind(9)));
        // A huge count is refused, not allocated.
        assert!(Op::decode(&[3, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert_eq!(args_bytes(&args(&["ab", ""])), 4 + 6 + 4);
        for op in &ops {
            assert_eq!(op.to_bytes().len(), op.encoded_bytes(), "{op:?}");
            assert_eq!(Op::decode_all(&op.to_bytes()), Ok(vec![op.clone()]));
            assert!(!Op::is_batch(&op.to_bytes()), "{op:?}");
        }
    }

    #[test]
    fn a_command_batch_decodes_to_its_commands_or_to_nothing() {
        let commands = vec![
            args(&["SET", "a", "1"]),
            args(&["INCR", "b"]),
            args(&["DEL", "a", "c"]),
        ];
        let bytes = Op::commands_to_bytes(41, &commands);
        assert_eq!(bytes.len(), commands_bytes(&commands));
        assert!(Op::is_batch(&bytes));
        let expected: Vec<Op> = commands
            .iter()
            .zip(41..)
            .map(|(args, seq)| Op::Command {
                seq,
                args: args.clone(),
            })
            .collect();
        assert_eq!(Op::decode_all(&bytes), Ok(expected));
        // Not a single operation: decode alone refuses the kind.
        assert_eq!(Op::decode(&bytes), Err(OpError::Kind(KIND_COMMANDS)));
        for cut in 0..bytes.len() {
            assert!(Op::decode_all(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(Op::decode_all(&longer), Err(OpError::Trailing(1)));
        // Counts outside 2..=PIPELINE_COMMANDS_MAX are refused.
        let max = vec![args(&["PING"]); PIPELINE_COMMANDS_MAX];
        assert_eq!(
            Op::decode_all(&Op::commands_to_bytes(1, &max)).map(|ops| ops.len()),
            Ok(PIPELINE_COMMANDS_MAX)
        );
        for count in [0u32, 1, PIPELINE_COMMANDS_MAX as u32 + 1] {
            let mut bytes = vec![KIND_COMMANDS];
            bytes.extend_from_slice(&1u64.to_be_bytes());
            bytes.extend_from_slice(&count.to_be_bytes());
            for _ in 0..count {
                put_args(&mut bytes, &args(&["PING"]));
            }
            assert_eq!(Op::decode_all(&bytes), Err(OpError::Count(count as usize)));
        }
        // Request numbers that would wrap are refused.
        let wrapping = Op::commands_to_bytes(u64::MAX, &commands[..2]);
        assert_eq!(Op::decode_all(&wrapping), Err(OpError::Count(2)));
    }

    #[test]
    #[should_panic(expected = "one command is a COMMAND")]
    fn a_batch_of_one_is_refused() {
        Op::commands_to_bytes(1, &[args(&["PING"])]);
    }
}
