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
"""

from __future__ import annotations

from pathlib import Path

from sparkbase_lab.cbuild import build_c

LIBRARY = "libsparkbase-node.so"
#: where the library lives inside a node
NODE_PATH = f"/usr/local/lib/sparkbase-lab/{LIBRARY}"

SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <string.h>
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
"""


def build(directory: Path) -> Path | None:
    """Compile the library into `directory` (rebuilt when the source changed); None when
    the machine has no C compiler or the build fails (the lab then runs without it)."""
    return build_c(directory, "sparkbase-node.c", SOURCE, LIBRARY,
                   flags=("-shared", "-fPIC"), libraries=("-ldl",))
