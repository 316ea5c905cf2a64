/* LD_PRELOAD shim for tests/storage/test_io_errors.py: makes the Raft
 * log's writes or fdatasyncs fail with EIO, as a dying disk does, without
 * root (no device-mapper error target, no FUSE).
 *
 * KEEL_FAIL_IO_DIR     files whose path starts with it are affected
 * KEEL_FAIL_IO_MODE    "sync": fdatasync/fsync fail; "write": pwrite fails
 * KEEL_FAIL_IO_TRIGGER a path: the failures happen only while it exists
 *
 * Every other call goes to the C library's own function. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static int armed(int fd, const char *mode) {
    const char *dir = getenv("KEEL_FAIL_IO_DIR");
    const char *want = getenv("KEEL_FAIL_IO_MODE");
    const char *trigger = getenv("KEEL_FAIL_IO_TRIGGER");
    struct stat st;
    char link[64], path[4096];
    ssize_t n;
    if (!dir || !want || !trigger || strcmp(want, mode) != 0) return 0;
    if (stat(trigger, &st) != 0) return 0;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof path - 1);
    if (n < 0) return 0;
    path[n] = '\0';
    return strncmp(path, dir, strlen(dir)) == 0;
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

int fdatasync(int fd) {
    if (armed(fd, "sync")) { errno = EIO; return -1; }
    return REAL(fdatasync)(fd);
}

int fsync(int fd) {
    if (armed(fd, "sync")) { errno = EIO; return -1; }
    return REAL(fsync)(fd);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    if (armed(fd, "write")) { errno = EIO; return -1; }
    return REAL(pwrite)(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t offset) {
    if (armed(fd, "write")) { errno = EIO; return -1; }
    return REAL(pwrite64)(fd, buf, count, offset);
}
