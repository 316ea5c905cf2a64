//! raft-engine's files with their room written ahead as zeros.
//!
//! raft-engine grows a log file in steps of 2 MiB with `fallocate`, which
//! leaves *unwritten* extents: every append that lands in one converts
//! part of it to written, a change of the file's extent map, and the
//! fdatasync that makes the append durable must write that metadata too
//! (ext4 without a journal writes the extent block synchronously, two
//! device writes and a flush per fsync instead of one write and a flush).
//! On this kind of VM an fdatasync of an append into fallocated room cost
//! 205-226 µs, one over blocks written before 137-143 µs (BENCHMARKS.md).
//!
//! `ZeroFill` is raft-engine's own file system with one change: the room
//! is made by writing zeros (`ZERO_CHUNK_BYTES` at a time), so appends
//! overwrite allocated, written blocks inside the file's size and an
//! fdatasync has only the data to write. Readers see the same thing as
//! after `fallocate`: zeros past the last record, which raft-engine
//! already handles (it truncates them on a clean close, and recovery
//! stops at them). The zeros reach the disk with the next fdatasync, one
//! larger flush every 2 MiB of log.
//!
//! Every other call goes to raft-engine's `DefaultFileSystem` unchanged,
//! its fail points included (tests/log_faults.rs uses them).

use std::io::{Result as IoResult, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use raft_engine::env::{DefaultFileSystem, FileSystem, Permission, WriteExt};

/// Zeros written per call while making room.
pub const ZERO_CHUNK_BYTES: usize = 256 * 1024;
/// The most room one `allocate` call may ask for (raft-engine asks 2 MiB
/// at a time, or one record larger than that).
pub const ALLOCATE_BYTES_MAX: usize = 64 * 1024 * 1024;

type Inner = DefaultFileSystem;
type InnerWriter = <Inner as FileSystem>::Writer;

/// raft-engine's default file system, room made with zeros.
pub struct ZeroFill;

impl FileSystem for ZeroFill {
    type Handle = <Inner as FileSystem>::Handle;
    type Reader = <Inner as FileSystem>::Reader;
    type Writer = ZeroFillWriter;

    fn create<P: AsRef<Path>>(&self, path: P) -> IoResult<Self::Handle> {
        DefaultFileSystem.create(path)
    }

    fn open<P: AsRef<Path>>(&self, path: P, perm: Permission) -> IoResult<Self::Handle> {
        DefaultFileSystem.open(path, perm)
    }

    fn delete<P: AsRef<Path>>(&self, path: P) -> IoResult<()> {
        DefaultFileSystem.delete(path)
    }

    fn rename<P: AsRef<Path>>(&self, src_path: P, dst_path: P) -> IoResult<()> {
        DefaultFileSystem.rename(src_path, dst_path)
    }

    fn new_reader(&self, handle: Arc<Self::Handle>) -> IoResult<Self::Reader> {
        DefaultFileSystem.new_reader(handle)
    }

    fn new_writer(&self, handle: Arc<Self::Handle>) -> IoResult<Self::Writer> {
        Ok(ZeroFillWriter {
            inner: DefaultFileSystem.new_writer(handle)?,
        })
    }
}

/// raft-engine's writer; `allocate` writes zeros.
pub struct ZeroFillWriter {
    inner: InnerWriter,
}

impl Write for ZeroFillWriter {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        self.inner.write(buf)
    }

    fn flush(&mut self) -> IoResult<()> {
        self.inner.flush()
    }
}

impl Seek for ZeroFillWriter {
    fn seek(&mut self, pos: SeekFrom) -> IoResult<u64> {
        self.inner.seek(pos)
    }
}

impl WriteExt for ZeroFillWriter {
    fn truncate(&mut self, offset: usize) -> IoResult<()> {
        self.inner.truncate(offset)
    }

    /// Writes zeros over [offset, offset + size) and puts the writer back
    /// where it was. raft-engine asks for room at its file's capacity, at
    /// or past where it writes next, so no record is overwritten.
    fn allocate(&mut self, offset: usize, size: usize) -> IoResult<()> {
        assert!(size <= ALLOCATE_BYTES_MAX, "allocate of {size} bytes");
        let position = self.inner.stream_position()?;
        assert!(
            offset as u64 >= position,
            "room asked at {offset}, before the write position {position}"
        );
        let zeros = vec![0u8; ZERO_CHUNK_BYTES.min(size)];
        self.inner.seek(SeekFrom::Start(offset as u64))?;
        let mut left = size;
        let written = (|| {
            while left > 0 {
                let n = left.min(zeros.len());
                self.inner.write_all(&zeros[..n])?;
                left -= n;
            }
            Ok(())
        })();
        self.inner.seek(SeekFrom::Start(position))?;
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_writes_zeros_past_the_records_and_keeps_the_position() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let fs = ZeroFill;
        let handle = Arc::new(fs.create(&path).unwrap());
        let mut writer = fs.new_writer(handle.clone()).unwrap();
        writer.write_all(b"header").unwrap();
        writer.allocate(6, 300_000).unwrap();
        assert_eq!(writer.stream_position().unwrap(), 6);
        writer.write_all(b"record").unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 300_006, "the room is inside the file's size");
        assert_eq!(&bytes[..12], b"headerrecord");
        assert!(
            bytes[12..].iter().all(|b| *b == 0),
            "room past the records is zeros"
        );
        // The blocks are allocated (not a hole, not unwritten extents).
        let blocks = std::fs::metadata(&path).unwrap();
        assert!(std::os::unix::fs::MetadataExt::blocks(&blocks) * 512 >= 300_000);
    }

    #[test]
    fn room_asked_behind_the_write_position_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fs = ZeroFill;
        let handle = Arc::new(fs.create(dir.path().join("log")).unwrap());
        let mut writer = fs.new_writer(handle).unwrap();
        writer.write_all(b"records").unwrap();
        let refused =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| writer.allocate(2, 10)));
        assert!(refused.is_err(), "zeros over written records");
    }
}
