"""The node's kernel for programs, not only for commands: a small LD_PRELOAD library.

Shims make `uname -r` and `getconf PAGESIZE` answer as the node's kernel, but a program
that asks the C library (`uname(2)`, `sysconf(_SC_PAGESIZE)`, `getpagesize()`: Python's
`platform.release()` and `os.sysconf`, a tool written for real Sparks) would see the
machine's. This library, built with the machine's C compiler when a lab is built and named
only in the node's own `/etc/ld.so.preload` (the overlay's upper dir: the machine's file is
untouched), answers those calls from files the node's boot step writes in
`/run/sparkbase-lab/` (`release`, `kernel_version`, `page_size`). It is deliberately small:
raw system calls, no allocation, and the real answer whenever a file is missing or
unreadable, so a node whose boot has not written them behaves as before. The machine name
stays the machine's (binaries in a node are the machine's; claiming `aarch64` to the C
library would mislead package tools). Without a C compiler the lab runs without it.

It also gives programs the node's `/proc/modules` on a machine kernel built without module
support (procfs cannot gain a file, and overlayfs refuses procfs as a layer): opening,
`stat`ing or testing that path (`open`, `openat`, `fopen`, the `stat` family, `statx`,
`access`) reaches the node's copy in `/run/sparkbase-lab/proc/modules`. A listing of
`/proc` (`ls /proc`) does not show it, and statically linked programs and raw system calls
still see the machine's procfs.
"""

from __future__ import annotations

from pathlib import Path

from sparkbase_lab.cbuild import build_c

LIBRARY = "libsparkbase-node.so"
#: where the library lives inside a node
NODE_PATH = f"/usr/local/lib/sparkbase-lab/{LIBRARY}"

SOURCE = r"""
#undef _FORTIFY_SOURCE
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

/* sparkbase lab: the node's kernel release and page size for programs (see preload.py) */

static long read_small(const char *path, char *buf, long size) {
    long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    long n = syscall(SYS_read, fd, buf, size - 1);
    syscall(SYS_close, fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) buf[--n] = 0;
    return n;
}

static void replace_field(const char *path, char *field, long size) {
    char value[sizeof(((struct utsname *)0)->release)];
    long n = read_small(path, value, sizeof value);
    if (n > 0 && n < size) memcpy(field, value, (size_t)n + 1);
}

int uname(struct utsname *u) {
    long rc = syscall(SYS_uname, u);
    if (rc != 0) return (int)rc;
    replace_field("/run/sparkbase-lab/release", u->release, sizeof u->release);
    replace_field("/run/sparkbase-lab/kernel_version", u->version, sizeof u->version);
    return 0;
}

static long node_page_size(void) {
    char buf[16];
    if (read_small("/run/sparkbase-lab/page_size", buf, sizeof buf) <= 0) return 0;
    long value = 0;
    for (const char *p = buf; *p >= '0' && *p <= '9'; p++) value = value * 10 + (*p - '0');
    return (value == 4096 || value == 16384 || value == 65536) ? value : 0;
}

long sysconf(int name) {
    static long (*real)(int);
    if (name == _SC_PAGESIZE) {
        long value = node_page_size();
        if (value) return value;
    }
    if (!real) real = (long (*)(int))dlsym(RTLD_NEXT, "sysconf");
    return real ? real(name) : -1;
}

int getpagesize(void) {
    static int (*real)(void);
    long value = node_page_size();
    if (value) return (int)value;
    if (!real) real = (int (*)(void))dlsym(RTLD_NEXT, "getpagesize");
    return real ? real() : 4096;
}

/* Files a kernel with module support has in /proc and the machine's kernel may not:
   procfs cannot gain a file, so a path that names one is answered from the node's copy
   (written by the boot step and modprobe) when that copy exists. */
#define NODE_PROC_MODULES "/run/sparkbase-lab/proc/modules"

/* The node's virtual consoles: `/dev/ttyN` (N 1-63) is the node's file
   /run/sparkbase-lab/dev/ttyN when the boot step wrote one; it holds the console's KD mode
   ("0" text, "1" graphics), which KDGETMODE and KDSETMODE on it read and write (ioctl below). */
#define NODE_DEV_TTY "/run/sparkbase-lab/dev/tty"
static __thread char node_tty[sizeof(NODE_DEV_TTY) + 3];

static const char *node_console(const char *path) {
    const char *n = path + 8;  /* after "/dev/tty" */
    if (strncmp(path, "/dev/tty", 8) != 0 || n[0] < '1' || n[0] > '9') return path;
    if (n[1] && (n[1] < '0' || n[1] > '9' || n[2])) return path;
    memcpy(node_tty, NODE_DEV_TTY, sizeof(NODE_DEV_TTY) - 1);
    memcpy(node_tty + sizeof(NODE_DEV_TTY) - 1, n, strlen(n) + 1);
    return syscall(SYS_faccessat, AT_FDCWD, node_tty, F_OK, 0) == 0 ? node_tty : path;
}

static const char *node_path(const char *path) {
    if (path && path[0] == '/' && strcmp(path, "/proc/modules") == 0
        && syscall(SYS_faccessat, AT_FDCWD, NODE_PROC_MODULES, F_OK, 0) == 0)
        return NODE_PROC_MODULES;
    if (path && path[0] == '/') return node_console(path);
    return path;
}

static void *next(const char *name) { return dlsym(RTLD_NEXT, name); }

/* where fd is open, when it is one of the node's consoles (into `target`), else 0 */
static int console_of(int fd, char *target, long size) {
    char link[32] = "/proc/self/fd/";
    char digits[12]; int i = 0, at = 14;
    if (fd < 0) return 0;
    do { digits[i++] = (char)('0' + fd % 10); fd /= 10; } while (fd && i < 11);
    while (i) link[at++] = digits[--i];
    link[at] = 0;
    long n = syscall(SYS_readlinkat, AT_FDCWD, link, target, size - 1);
    if (n <= 0) return 0;
    target[n] = 0;
    return strncmp(target, NODE_DEV_TTY, sizeof(NODE_DEV_TTY) - 1) == 0;
}

#define KDSETMODE 0x4B3A
#define KDGETMODE 0x4B3B

int ioctl(int fd, unsigned long request, ...) {
    static int (*real)(int, unsigned long, ...);
    va_list ap; va_start(ap, request); void *arg = va_arg(ap, void *); va_end(ap);
    char target[128];
    if ((request == KDGETMODE || request == KDSETMODE) && console_of(fd, target, sizeof target)) {
        char mode[2] = {'0', '\n'};
        if (request == KDGETMODE) {
            if (syscall(SYS_pread64, fd, mode, 1, 0) != 1) { errno = EIO; return -1; }
            *(int *)arg = mode[0] - '0';
            return 0;
        }
        long w = syscall(SYS_openat, AT_FDCWD, target, O_WRONLY | O_TRUNC | O_CLOEXEC);
        if (w < 0) { errno = EPERM; return -1; }
        mode[0] = (char)('0' + ((long)arg == 1));
        syscall(SYS_write, w, mode, 2);
        syscall(SYS_close, w);
        return 0;
    }
    if (!real) real = (int (*)(int, unsigned long, ...))next("ioctl");
    return real(fd, request, arg);
}

static mode_t open_mode(int flags, va_list ap) {
    return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

#define OPEN_LIKE(fn)                                                              \
    int fn(const char *path, int flags, ...) {                                     \
        static int (*real)(const char *, int, ...);                                \
        va_list ap; va_start(ap, flags); mode_t mode = open_mode(flags, ap); va_end(ap); \
        if (!real) real = (int (*)(const char *, int, ...))next(#fn);              \
        return real(node_path(path), flags, mode);                                 \
    }
OPEN_LIKE(open)
OPEN_LIKE(open64)

#define OPENAT_LIKE(fn)                                                            \
    int fn(int dir, const char *path, int flags, ...) {                            \
        static int (*real)(int, const char *, int, ...);                           \
        va_list ap; va_start(ap, flags); mode_t mode = open_mode(flags, ap); va_end(ap); \
        if (!real) real = (int (*)(int, const char *, int, ...))next(#fn);         \
        return real(dir, node_path(path), flags, mode);                            \
    }
OPENAT_LIKE(openat)
OPENAT_LIKE(openat64)

#define OPEN2_LIKE(fn)                                                             \
    int fn(const char *path, int flags) {                                          \
        static int (*real)(const char *, int);                                     \
        if (!real) real = (int (*)(const char *, int))next(#fn);                   \
        return real(node_path(path), flags);                                       \
    }
int __open_2(const char *, int);
int __open64_2(const char *, int);
OPEN2_LIKE(__open_2)
OPEN2_LIKE(__open64_2)

#define OPENAT2_LIKE(fn)                                                           \
    int fn(int dir, const char *path, int flags) {                                 \
        static int (*real)(int, const char *, int);                                \
        if (!real) real = (int (*)(int, const char *, int))next(#fn);              \
        return real(dir, node_path(path), flags);                                  \
    }
int __openat_2(int, const char *, int);
int __openat64_2(int, const char *, int);
OPENAT2_LIKE(__openat_2)
OPENAT2_LIKE(__openat64_2)

#define FOPEN_LIKE(fn)                                                             \
    FILE *fn(const char *path, const char *mode) {                                 \
        static FILE *(*real)(const char *, const char *);                          \
        if (!real) real = (FILE *(*)(const char *, const char *))next(#fn);        \
        return real(node_path(path), mode);                                        \
    }
FOPEN_LIKE(fopen)
FOPEN_LIKE(fopen64)

#define STAT_LIKE(fn, type)                                                        \
    int fn(const char *path, type *buf) {                                          \
        static int (*real)(const char *, type *);                                  \
        if (!real) real = (int (*)(const char *, type *))next(#fn);                \
        return real ? real(node_path(path), buf) : -1;                             \
    }
STAT_LIKE(stat, struct stat)
STAT_LIKE(stat64, struct stat64)
STAT_LIKE(lstat, struct stat)
STAT_LIKE(lstat64, struct stat64)

#define XSTAT_LIKE(fn, type)                                                       \
    int fn(int ver, const char *path, type *buf) {                                 \
        static int (*real)(int, const char *, type *);                             \
        if (!real) real = (int (*)(int, const char *, type *))next(#fn);          \
        return real ? real(ver, node_path(path), buf) : -1;                        \
    }
int __xstat(int, const char *, struct stat *);
int __xstat64(int, const char *, struct stat64 *);
int __lxstat(int, const char *, struct stat *);
int __lxstat64(int, const char *, struct stat64 *);
XSTAT_LIKE(__xstat, struct stat)
XSTAT_LIKE(__xstat64, struct stat64)
XSTAT_LIKE(__lxstat, struct stat)
XSTAT_LIKE(__lxstat64, struct stat64)

#define FSTATAT_LIKE(fn, type)                                                     \
    int fn(int dir, const char *path, type *buf, int flags) {                      \
        static int (*real)(int, const char *, type *, int);                        \
        if (!real) real = (int (*)(int, const char *, type *, int))next(#fn);      \
        return real ? real(dir, node_path(path), buf, flags) : -1;                 \
    }
FSTATAT_LIKE(fstatat, struct stat)
FSTATAT_LIKE(fstatat64, struct stat64)

int statx(int dir, const char *path, int flags, unsigned int mask, struct statx *buf) {
    static int (*real)(int, const char *, int, unsigned int, struct statx *);
    if (!real) real = (int (*)(int, const char *, int, unsigned int, struct statx *))next("statx");
    return real ? real(dir, node_path(path), flags, mask, buf) : -1;
}

int access(const char *path, int mode) {
    static int (*real)(const char *, int);
    if (!real) real = (int (*)(const char *, int))next("access");
    return real(node_path(path), mode);
}

int faccessat(int dir, const char *path, int mode, int flags) {
    static int (*real)(int, const char *, int, int);
    if (!real) real = (int (*)(int, const char *, int, int))next("faccessat");
    return real(dir, node_path(path), mode, flags);
}

int euidaccess(const char *path, int mode) {
    static int (*real)(const char *, int);
    if (!real) real = (int (*)(const char *, int))next("euidaccess");
    return real(node_path(path), mode);
}

int eaccess(const char *path, int mode) {
    static int (*real)(const char *, int);
    if (!real) real = (int (*)(const char *, int))next("eaccess");
    return real(node_path(path), mode);
}
"""


def build(directory: Path) -> Path | None:
    """Compile the library into `directory` (rebuilt when the source changed); None when
    the machine has no C compiler or the build fails (the lab then runs without it)."""
    return build_c(directory, "sparkbase-node.c", SOURCE, LIBRARY,
                   flags=("-shared", "-fPIC"), libraries=("-ldl",))
