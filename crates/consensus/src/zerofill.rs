//! raft-engine's files: their room written ahead as zeros, their records
//! written with O_DIRECT.
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
//! Direct IO (`ZeroFill::direct_io`, TOML `log_direct_io`, on by
//! default): the writer also opens the file with O_DIRECT and writes whole
//! 4 KiB blocks, the block that holds the write position kept in memory
//! (`Tail`), so an append rewrites the records before it in that block
//! with the bytes they already have and pads past its end with zeros.
//! The file's size stays what raft-engine counts (`ZeroFillWriter::size`):
//! where a block's padding passes it, the file is cut back to it. When
//! raft-engine closes a file whose records fill the room it asked for, it
//! does not truncate it, and it reads a closed file to its end: zeros
//! there are a broken record to it, and the node would not restart.
//! Nothing goes through the page cache: the fdatasync that follows has no
//! dirty page to write back, only the device's cache to flush. On this
//! kind of VM an append of 128 bytes and its fdatasync took p50 54-66 µs
//! and 13-19 µs of CPU, against 81-100 µs and 38-42 µs buffered
//! (BENCHMARKS.md, 2026-12-06). Past the write position the file holds
//! nothing raft-engine reads (zeros of the room, or a recycled file's old
//! records, which it tells from its own by their signature), so the
//! padding changes nothing a reader sees. A file system that refuses
//! O_DIRECT (at open, or EINVAL at the first write) gets buffered writes,
//! logged once.
//!
//! Every other call goes to raft-engine's `DefaultFileSystem` unchanged,
//! its fail points included (tests/log_faults.rs uses them); the direct
//! writes answer the same fail points as raft-engine's own writes.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fs::File;
use std::io::{Error as IoError, ErrorKind, Result as IoResult, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use raft_engine::env::{DefaultFileSystem, FileSystem, Handle, Permission, WriteExt};

/// Zeros written per call while making room.
pub const ZERO_CHUNK_BYTES: usize = 256 * 1024;
/// The most room one `allocate` call may ask for (raft-engine asks 2 MiB
/// at a time, or one record larger than that).
pub const ALLOCATE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Direct writes start, end and sit in memory on this boundary (the
/// largest logical block size of the devices Keel runs on).
pub const DIRECT_IO_ALIGN_BYTES: usize = 4096;
/// The largest direct write: raft-engine writes one batch at a time, and
/// Keel's batches are bounded well below this (`BATCH_BYTES_MAX`, a
/// snapshot's metadata); a larger one goes through the page cache.
pub const DIRECT_WRITE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// A writer's block buffer is kept between writes up to this size (a
/// batch is at most `BATCH_BYTES_MAX`, 4 MiB); one grown past it by a
/// larger write (a follower catching up) is freed after that write.
pub const SCRATCH_KEPT_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Whether "buffered writes" was logged already (once per process).
static FALLBACK_LOGGED: AtomicBool = AtomicBool::new(false);

type Inner = DefaultFileSystem;
type InnerFd = <Inner as FileSystem>::Handle;
type InnerFile = <Inner as FileSystem>::Writer;

/// raft-engine's default file system, room made with zeros, records
/// written with O_DIRECT when `direct_io`.
pub struct ZeroFill {
    pub direct_io: bool,
}

impl ZeroFill {
    /// The file opened again with O_DIRECT for the writer, or None (off,
    /// or refused: buffered writes then).
    fn open_direct(&self, path: &Path) -> Option<File> {
        if !self.direct_io {
            return None;
        }
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(file) => Some(file),
            Err(error) => {
                log_fallback(path, &error);
                None
            }
        }
    }
}

impl ZeroFill {
    /// raft-engine's descriptor of `path`, and a direct one beside it when
    /// the file is opened for writing.
    fn handle(&self, fd: InnerFd, path: &Path, perm: Permission) -> LogHandle {
        let direct = match perm {
            Permission::ReadWrite => self.open_direct(path),
            Permission::ReadOnly => None,
        };
        LogHandle {
            fd: Arc::new(fd),
            direct,
            path: path.to_path_buf(),
        }
    }
}

fn log_fallback(path: &Path, error: &IoError) {
    if !FALLBACK_LOGGED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            path = %path.display(),
            %error,
            "the raft log's file system refuses O_DIRECT; its writes go through the page cache"
        );
    }
}

/// raft-engine's file handle, plus the same file opened with O_DIRECT.
pub struct LogHandle {
    fd: Arc<InnerFd>,
    direct: Option<File>,
    path: std::path::PathBuf,
}

impl Handle for LogHandle {
    fn truncate(&self, offset: usize) -> IoResult<()> {
        self.fd.truncate(offset)
    }

    fn file_size(&self) -> IoResult<usize> {
        self.fd.file_size()
    }

    /// fdatasync of the buffered descriptor: the direct writes are on the
    /// device already; this writes what the page cache holds (nothing,
    /// after direct writes) and the file's size when it grew, then flushes
    /// the device's cache.
    fn sync(&self) -> IoResult<()> {
        self.fd.sync()
    }
}

impl FileSystem for ZeroFill {
    type Handle = LogHandle;
    type Reader = <Inner as FileSystem>::Reader;
    type Writer = ZeroFillWriter;

    fn create<P: AsRef<Path>>(&self, path: P) -> IoResult<Self::Handle> {
        let fd = DefaultFileSystem.create(path.as_ref())?;
        Ok(self.handle(fd, path.as_ref(), Permission::ReadWrite))
    }

    fn open<P: AsRef<Path>>(&self, path: P, perm: Permission) -> IoResult<Self::Handle> {
        let fd = DefaultFileSystem.open(path.as_ref(), perm)?;
        Ok(self.handle(fd, path.as_ref(), perm))
    }

    fn delete<P: AsRef<Path>>(&self, path: P) -> IoResult<()> {
        DefaultFileSystem.delete(path)
    }

    fn rename<P: AsRef<Path>>(&self, src_path: P, dst_path: P) -> IoResult<()> {
        DefaultFileSystem.rename(src_path, dst_path)
    }

    fn new_reader(&self, handle: Arc<Self::Handle>) -> IoResult<Self::Reader> {
        DefaultFileSystem.new_reader(handle.fd.clone())
    }

    fn new_writer(&self, handle: Arc<Self::Handle>) -> IoResult<Self::Writer> {
        let inner = DefaultFileSystem.new_writer(handle.fd.clone())?;
        let tail = handle.direct.is_some().then(Tail::new);
        let size = handle.fd.file_size()?;
        Ok(ZeroFillWriter {
            inner,
            handle,
            tail,
            size,
        })
    }
}

/// raft-engine's writer; `allocate` writes zeros; with direct IO every
/// write is whole blocks through the O_DIRECT descriptor.
pub struct ZeroFillWriter {
    /// Buffered writes, and the position raft-engine reads back.
    inner: InnerFile,
    handle: Arc<LogHandle>,
    /// Some while writes go direct.
    tail: Option<Tail>,
    /// The file's size as raft-engine counts it (its `capacity`): the
    /// furthest end of a record or of the room it asked for, or where it
    /// truncated. A direct write that passes it is cut back (`trim`).
    size: usize,
}

/// The direct writer's state: the write position and the block that
/// holds it, whose bytes before the position are the file's (records
/// written earlier) and after it zeros.
struct Tail {
    position: usize,
    block: AlignedBuf,
    /// The blocks of one write, reused (grows to the largest write).
    scratch: AlignedBuf,
}

impl Tail {
    fn new() -> Tail {
        Tail {
            position: 0,
            block: AlignedBuf::zeroed(DIRECT_IO_ALIGN_BYTES),
            scratch: AlignedBuf::zeroed(DIRECT_IO_ALIGN_BYTES),
        }
    }

    /// The offset of the block that holds `position`.
    fn block_start(&self) -> usize {
        round_down(self.position)
    }
}

fn round_down(offset: usize) -> usize {
    offset / DIRECT_IO_ALIGN_BYTES * DIRECT_IO_ALIGN_BYTES
}

fn round_up(offset: usize) -> usize {
    offset.div_ceil(DIRECT_IO_ALIGN_BYTES) * DIRECT_IO_ALIGN_BYTES
}

/// Writes all of `bytes` at `offset` through a direct descriptor; every
/// argument is block-aligned, and so is every partial write the kernel
/// may return.
fn pwrite_all(file: &File, bytes: &[u8], offset: usize) -> IoResult<()> {
    assert_eq!(offset % DIRECT_IO_ALIGN_BYTES, 0);
    assert_eq!(bytes.len() % DIRECT_IO_ALIGN_BYTES, 0);
    assert_eq!(bytes.as_ptr() as usize % DIRECT_IO_ALIGN_BYTES, 0);
    let mut done = 0;
    while done < bytes.len() {
        match file.write_at(&bytes[done..], (offset + done) as u64) {
            Ok(0) => {
                return Err(IoError::new(
                    ErrorKind::WriteZero,
                    "direct pwrite wrote nothing",
                ))
            }
            Ok(n) if n % DIRECT_IO_ALIGN_BYTES != 0 => {
                return Err(IoError::other(format!(
                    "direct pwrite wrote {n} bytes, not whole blocks"
                )))
            }
            Ok(n) => done += n,
            Err(error) if error.kind() == ErrorKind::Interrupted => continue,
            Err(error) if error.raw_os_error() == Some(libc::ENOSPC) => {
                // raft-engine tells a full disk by this word, and asks the
                // batch again (the driver waits for space).
                return Err(IoError::new(
                    ErrorKind::StorageFull,
                    format!("nospace: {error}"),
                ));
            }
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

impl ZeroFillWriter {
    /// `buf` at the write position, as whole blocks: the held block's
    /// bytes before the position, `buf`, zeros to the block's end.
    fn write_direct(&mut self, buf: &[u8]) -> IoResult<()> {
        fail::fail_point!("log_fd::write::no_space_err", |_| {
            Err(IoError::new(ErrorKind::StorageFull, "nospace: fail point"))
        });
        fail::fail_point!("log_file::write::err", |_| {
            Err(IoError::new(ErrorKind::InvalidInput, "fp"))
        });
        // A file system that opens O_DIRECT and then refuses the write.
        fail::fail_point!("zerofill::direct_write::einval", |_| {
            Err(IoError::from_raw_os_error(libc::EINVAL))
        });
        let file = self.handle.direct.as_ref().expect("a direct descriptor");
        let tail = self.tail.as_mut().expect("direct writes");
        let start = tail.block_start();
        let head = tail.position - start;
        let end = tail.position + buf.len();
        let length = round_up(end) - start;
        tail.scratch.reserve(length);
        let scratch = &mut tail.scratch.as_mut()[..length];
        scratch[..head].copy_from_slice(&tail.block.as_ref()[..head]);
        scratch[head..head + buf.len()].copy_from_slice(buf);
        scratch[head + buf.len()..].fill(0);
        pwrite_all(file, scratch, start)?;
        // The block that holds the new position: the last one written,
        // unless the write ended on a boundary (a fresh block: zeros).
        let last = round_down(end) - start;
        if last < length {
            let copy = &scratch[last..last + DIRECT_IO_ALIGN_BYTES];
            tail.block.as_mut().copy_from_slice(copy);
        } else {
            tail.block.as_mut().fill(0);
        }
        tail.position = end;
        if tail.scratch.len() > SCRATCH_KEPT_BYTES_MAX {
            tail.scratch = AlignedBuf::zeroed(DIRECT_IO_ALIGN_BYTES);
        }
        self.inner.seek(SeekFrom::Start(end as u64))?;
        self.size = self.size.max(end);
        self.trim(start + length)
    }

    /// After a direct write that ended at `written_end` (a block
    /// boundary): the padding past `size` is cut off. This happens where
    /// raft-engine's room ends inside a block: once per room it asks for
    /// (its first room is its header's, so every later end is unaligned),
    /// and for the write that reaches into that last block.
    fn trim(&mut self, written_end: usize) -> IoResult<()> {
        if written_end > self.size {
            self.handle.fd.truncate(self.size)?;
        }
        Ok(())
    }

    /// The direct writer moves to `position`: the block that holds it is
    /// read back (its bytes before the position; zeros after), unless
    /// the position is where it already is.
    fn move_direct(&mut self, position: usize) -> IoResult<()> {
        let file = self.handle.direct.as_ref().expect("a direct descriptor");
        let tail = self.tail.as_mut().expect("direct writes");
        if tail.position == position {
            return Ok(());
        }
        let start = round_down(position);
        let head = position - start;
        let block = tail.block.as_mut();
        block.fill(0);
        if head > 0 {
            // One read of the whole block (a direct read past the end of
            // the file returns what there is: the records end before it).
            loop {
                match file.read_at(block, start as u64) {
                    Ok(_) => break,
                    Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                    Err(error) => return Err(error),
                }
            }
            block[head..].fill(0);
        }
        tail.position = position;
        Ok(())
    }

    /// Direct IO refused at the first write (EINVAL: the file system
    /// opens O_DIRECT but cannot do it): buffered from here on.
    fn fall_back(&mut self, error: &IoError) {
        log_fallback(&self.handle.path, error);
        self.tail = None;
    }

    fn allocate_direct(&mut self, offset: usize, size: usize) -> IoResult<()> {
        let file = self.handle.direct.as_ref().expect("a direct descriptor");
        let tail = self.tail.as_ref().expect("direct writes");
        let start = round_down(offset);
        let end = round_up(offset + size);
        let mut chunk = AlignedBuf::zeroed(ZERO_CHUNK_BYTES.min(end - start));
        let mut at = start;
        while at < end {
            let n = (end - at).min(chunk.len());
            let held = at == tail.block_start();
            if held {
                // The records before the write position in this block stay.
                chunk.as_mut()[..DIRECT_IO_ALIGN_BYTES].copy_from_slice(tail.block.as_ref());
            }
            pwrite_all(file, &chunk.as_ref()[..n], at)?;
            if held {
                chunk.as_mut()[..DIRECT_IO_ALIGN_BYTES].fill(0);
            }
            at += n;
        }
        self.size = self.size.max(offset + size);
        self.trim(end)
    }
}

impl Write for ZeroFillWriter {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        if self.tail.is_some() && buf.len() <= DIRECT_WRITE_BYTES_MAX {
            match self.write_direct(buf) {
                Ok(()) => return Ok(buf.len()),
                Err(error) if error.raw_os_error() == Some(libc::EINVAL) => self.fall_back(&error),
                Err(error) => return Err(error),
            }
        }
        let written = self.inner.write(buf)?;
        let position = self.inner.stream_position()? as usize;
        self.size = self.size.max(position);
        if self.tail.is_some() {
            // A write larger than a direct one went through the page
            // cache: the held block is read back where it ended.
            self.move_direct(position)?;
        }
        Ok(written)
    }

    fn flush(&mut self) -> IoResult<()> {
        self.inner.flush()
    }
}

impl Seek for ZeroFillWriter {
    fn seek(&mut self, pos: SeekFrom) -> IoResult<u64> {
        let position = self.inner.seek(pos)?;
        if self.tail.is_some() {
            self.move_direct(position as usize)?;
        }
        Ok(position)
    }
}

impl WriteExt for ZeroFillWriter {
    fn truncate(&mut self, offset: usize) -> IoResult<()> {
        self.inner.truncate(offset)?;
        self.size = offset;
        if self.tail.is_some() {
            // raft-engine cuts its file at its write position (zeros of
            // the room past it); the held block is then the same.
            self.move_direct(offset)?;
        }
        Ok(())
    }

    /// Writes zeros over [offset, offset + size) and puts the writer back
    /// where it was. raft-engine asks for room at its file's capacity, at
    /// or past where it writes next, so no record is overwritten. Direct:
    /// whole blocks, from the one holding `offset` (its records before
    /// the write position kept) to the end of the last.
    fn allocate(&mut self, offset: usize, size: usize) -> IoResult<()> {
        assert!(size <= ALLOCATE_BYTES_MAX, "allocate of {size} bytes");
        let position = self.inner.stream_position()?;
        assert!(
            offset as u64 >= position,
            "room asked at {offset}, before the write position {position}"
        );
        if self.tail.is_some() {
            return self.allocate_direct(offset, size);
        }
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
        self.size = self.size.max(offset + size - left);
        written
    }
}

/// A zeroed buffer aligned to `DIRECT_IO_ALIGN_BYTES`, its length a
/// multiple of it (what O_DIRECT asks of memory).
struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is owned memory, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    fn zeroed(len: usize) -> AlignedBuf {
        let len = round_up(len.max(1));
        let layout = Layout::from_size_align(len, DIRECT_IO_ALIGN_BYTES).expect("a valid layout");
        // SAFETY: the layout's size is not zero.
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr =
            std::ptr::NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }

    fn len(&self) -> usize {
        self.len
    }

    /// At least `len` bytes (contents not kept: callers fill what they use).
    fn reserve(&mut self, len: usize) {
        if len > self.len {
            *self = AlignedBuf::zeroed(len.next_power_of_two());
        }
    }

    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` points at `len` initialized bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout =
            Layout::from_size_align(self.len, DIRECT_IO_ALIGN_BYTES).expect("a valid layout");
        // SAFETY: allocated with this layout in `zeroed`.
        unsafe { dealloc(self.ptr.as_ptr(), layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn both() -> [ZeroFill; 2] {
        [ZeroFill { direct_io: false }, ZeroFill { direct_io: true }]
    }

    #[test]
    fn allocate_writes_zeros_past_the_records_and_keeps_the_position() {
        for fs in both() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("log");
            let handle = Arc::new(fs.create(&path).unwrap());
            let mut writer = fs.new_writer(handle.clone()).unwrap();
            writer.write_all(b"header").unwrap();
            writer.allocate(6, 300_000).unwrap();
            assert_eq!(writer.stream_position().unwrap(), 6);
            writer.write_all(b"record").unwrap();
            let bytes = std::fs::read(&path).unwrap();
            // Direct or not, the file ends where the room does (a direct
            // write's padding past it is cut off).
            assert_eq!(bytes.len(), 300_006, "the room is the file's size");
            assert_eq!(&bytes[..12], b"headerrecord");
            assert!(
                bytes[12..].iter().all(|b| *b == 0),
                "room past the records is zeros"
            );
            // The blocks are allocated (not a hole, not unwritten extents).
            let blocks = std::fs::metadata(&path).unwrap();
            assert!(std::os::unix::fs::MetadataExt::blocks(&blocks) * 512 >= 300_000);
        }
    }

    #[test]
    fn room_asked_behind_the_write_position_is_refused() {
        for fs in both() {
            let dir = tempfile::tempdir().unwrap();
            let handle = Arc::new(fs.create(dir.path().join("log")).unwrap());
            let mut writer = fs.new_writer(handle).unwrap();
            writer.write_all(b"records").unwrap();
            let refused =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| writer.allocate(2, 10)));
            assert!(refused.is_err(), "zeros over written records");
        }
    }

    #[test]
    fn this_machines_file_system_takes_direct_writes() {
        // The tests below prove the direct path only where it is taken.
        let dir = tempfile::tempdir().unwrap();
        let fs = ZeroFill { direct_io: true };
        let handle = Arc::new(fs.create(dir.path().join("log")).unwrap());
        assert!(
            handle.direct.is_some(),
            "O_DIRECT refused under {:?}",
            dir.path()
        );
        let mut writer = fs.new_writer(handle).unwrap();
        writer.write_all(b"x").unwrap();
        assert!(writer.tail.is_some(), "the first direct write fell back");
    }

    /// A small deterministic generator (no dependency for one test).
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 33) as usize) % n
        }
    }

    /// The file, read through raft-engine's reader (the buffered
    /// descriptor), equals what was written up to the write position, and
    /// holds zeros from there to its end, which is `size` (raft-engine's
    /// capacity: zeros past it would be a broken record to raft-engine
    /// once it closed the file).
    fn check(fs: &ZeroFill, path: &Path, model: &[u8], size: usize) {
        let handle = Arc::new(fs.open(path, Permission::ReadOnly).unwrap());
        let mut reader = fs.new_reader(handle).unwrap();
        let mut bytes = Vec::new();
        reader.read_to_end(&mut bytes).unwrap();
        assert!(
            bytes.len() >= model.len(),
            "{} < {}",
            bytes.len(),
            model.len()
        );
        assert_eq!(bytes.len(), size, "the file's size is raft-engine's");
        assert!(bytes[..model.len()] == *model, "records differ");
        assert!(
            bytes[model.len()..].iter().all(|b| *b == 0),
            "not zeros past the records"
        );
    }

    #[test]
    fn direct_appends_of_every_size_read_back_as_written_across_reopens() {
        let fs = ZeroFill { direct_io: true };
        for seed in 1..=8u64 {
            let mut rng = Lcg(seed);
            let dir = tempfile::tempdir().unwrap();
            let (path, mut writer) = direct_writer(&fs, dir.path());
            let mut model: Vec<u8> = Vec::new();
            let mut capacity = 0usize;
            for step in 0..300 {
                match rng.below(20) {
                    // Reopen where the records end (raft-engine continues
                    // its active file after a restart at its size).
                    0 => {
                        writer.truncate(model.len()).unwrap();
                        capacity = model.len();
                        drop(writer);
                        let handle = Arc::new(fs.open(&path, Permission::ReadWrite).unwrap());
                        assert_eq!(handle.file_size().unwrap(), model.len());
                        writer = fs.new_writer(handle).unwrap();
                        writer.seek(SeekFrom::Start(model.len() as u64)).unwrap();
                    }
                    // Room ahead, at the capacity, as raft-engine asks it.
                    1 | 2 => {
                        let size = 1 + rng.below(3 * DIRECT_IO_ALIGN_BYTES);
                        writer.allocate(capacity.max(model.len()), size).unwrap();
                        capacity = capacity.max(model.len()) + size;
                    }
                    // A write ending on a block boundary.
                    3 => {
                        let size = round_up(model.len() + 1) - model.len();
                        let bytes: Vec<u8> = (0..size).map(|i| (step + i) as u8 | 1).collect();
                        writer.write_all(&bytes).unwrap();
                        model.extend_from_slice(&bytes);
                    }
                    // Appends from empty to several blocks.
                    _ => {
                        let size = match rng.below(4) {
                            0 => rng.below(16),
                            1 | 2 => rng.below(600),
                            _ => rng.below(3 * DIRECT_IO_ALIGN_BYTES + 100),
                        };
                        let bytes: Vec<u8> = (0..size).map(|i| (step * 7 + i) as u8 | 1).collect();
                        writer.write_all(&bytes).unwrap();
                        model.extend_from_slice(&bytes);
                    }
                }
                assert_eq!(writer.stream_position().unwrap() as usize, model.len());
                if step % 25 == 0 {
                    check(&fs, &path, &model, capacity.max(model.len()));
                }
            }
            assert!(
                writer.tail.is_some(),
                "seed {seed}: fell back to buffered writes"
            );
            check(&fs, &path, &model, capacity.max(model.len()));
        }
    }

    /// A new file "log" in `dir` and its direct writer.
    fn direct_writer(fs: &ZeroFill, dir: &Path) -> (std::path::PathBuf, ZeroFillWriter) {
        assert!(fs.direct_io);
        let path = dir.join("log");
        let writer = fs.new_writer(Arc::new(fs.create(&path).unwrap())).unwrap();
        (path, writer)
    }

    #[test]
    fn a_write_larger_than_the_kept_buffer_reads_back_and_frees_it() {
        let fs = ZeroFill { direct_io: true };
        let dir = tempfile::tempdir().unwrap();
        let (path, mut writer) = direct_writer(&fs, dir.path());
        let mut model = b"head".to_vec();
        writer.write_all(&model).unwrap();
        let large: Vec<u8> = (0..SCRATCH_KEPT_BYTES_MAX + 5000)
            .map(|i| (i % 251) as u8 | 1)
            .collect();
        writer.write_all(&large).unwrap();
        model.extend_from_slice(&large);
        assert!(writer.tail.as_ref().unwrap().scratch.len() <= SCRATCH_KEPT_BYTES_MAX);
        writer.write_all(b"tail").unwrap();
        model.extend_from_slice(b"tail");
        check(&fs, &path, &model, model.len());
    }

    #[test]
    fn a_header_written_again_at_the_start_keeps_nothing_of_the_old_first_block() {
        // raft-engine rewinds and writes a fresh header over a reused file.
        let fs = ZeroFill { direct_io: true };
        let dir = tempfile::tempdir().unwrap();
        let (path, mut writer) = direct_writer(&fs, dir.path());
        writer.write_all(&[9u8; 5000]).unwrap();
        writer.rewind().unwrap();
        writer.write_all(b"head").unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..4], b"head");
        assert!(bytes[4..DIRECT_IO_ALIGN_BYTES].iter().all(|b| *b == 0));
        // The second block is not the writer's: left as it was.
        assert!(bytes[DIRECT_IO_ALIGN_BYTES..5000].iter().all(|b| *b == 9));
    }
}
