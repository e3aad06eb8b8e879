/* sparkbase lab: a node command (uname, systemctl, ...) run by the node's command server.
 *
 * Installed as /usr/local/bin/<command> in every node (see sparkbase_lab/shimd_client.py);
 * the command is basename(argv[0]). Connects to the server's unix socket, sends the
 * request (wire format: shimd.py) with descriptors 0, 1 and 2, and exits with the status
 * the server replies. When the socket is missing or refuses, or the server answers
 * FALLBACK, it runs the command the old way: python3 -IS shim.py <command> args...
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef SOCKET_PATH /* -D overrides: the unit tests build a client for a server of their own */
#define SOCKET_PATH "/run/sparkbase-lab/shimd.sock"
#endif
#ifndef PYTHON
#define PYTHON "/usr/bin/python3"
#endif
#ifndef SHIM
#define SHIM "/usr/local/lib/sparkbase-lab/shim.py"
#endif
#define VERSION "sparkbase-shimd-1"
#define FALLBACK (-1)

extern char **environ;

static void fallback(const char *command, int argc, char **argv) {
    char **args = calloc((size_t)argc + 4, sizeof *args);
    if (args) {
        args[0] = PYTHON;
        args[1] = "-IS";
        args[2] = SHIM;
        args[3] = (char *)command;
        for (int i = 1; i < argc; i++) args[3 + i] = argv[i];
        execv(PYTHON, args);
    }
    fprintf(stderr, "%s: cannot run %s: %s\n", command, PYTHON, strerror(errno));
    _exit(127);
}

struct buffer { char *data; size_t len, cap; };

static int append(struct buffer *b, const char *field) {
    size_t n = strlen(field) + 1;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->len + n > cap) cap *= 2;
        char *data = realloc(b->data, cap);
        if (!data) return -1;
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, field, n);
    b->len += n;
    return 0;
}

/* The request payload; -1 when it cannot be built (then the fallback runs). */
static int build_request(struct buffer *b, const char *command, int argc, char **argv) {
    char *cwd = getcwd(NULL, 0);
    if (!cwd) return -1;
    mode_t mask = umask(0);
    umask(mask);
    char number[32];
    int rc = append(b, VERSION) | append(b, command) | append(b, cwd);
    free(cwd);
    snprintf(number, sizeof number, "%o", (unsigned)mask);
    rc |= append(b, number);
    snprintf(number, sizeof number, "%d", argc - 1);
    rc |= append(b, number);
    for (int i = 1; i < argc; i++) rc |= append(b, argv[i]);
    for (char **e = environ; e && *e; e++) rc |= append(b, *e);
    return rc;
}

/* The length header with descriptors 0, 1, 2 attached, then the payload. */
static int send_request(int sock, const struct buffer *b) {
    int32_t size = (int32_t)b->len;
    struct iovec iov = { &size, sizeof size };
    union { char buf[CMSG_SPACE(3 * sizeof(int))]; struct cmsghdr align; } control;
    memset(&control, 0, sizeof control);
    struct msghdr msg = { 0 };
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(3 * sizeof(int));
    int fds[3] = { 0, 1, 2 };
    memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
    ssize_t sent;
    do sent = sendmsg(sock, &msg, MSG_NOSIGNAL); while (sent < 0 && errno == EINTR);
    if (sent != (ssize_t)sizeof size) return -1;
    for (size_t done = 0; done < b->len;) {
        ssize_t n = send(sock, b->data + done, b->len - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        done += (size_t)n;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *slash = argc > 0 ? strrchr(argv[0], '/') : NULL;
    const char *command = argc > 0 ? (slash ? slash + 1 : argv[0]) : "";
    if (argc < 1) {
        fprintf(stderr, "sparkbase lab: a node command needs its name in argv[0]\n");
        return 127;
    }
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0) fallback(command, argc, argv);

    struct buffer request = { 0 };
    if (build_request(&request, command, argc, argv) != 0) fallback(command, argc, argv);

    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    strncpy(addr.sun_path, SOCKET_PATH, sizeof addr.sun_path - 1);
    if (sock < 0 || connect(sock, (struct sockaddr *)&addr, sizeof addr) != 0
        || send_request(sock, &request) != 0) {
        if (sock >= 0) close(sock);
        fallback(command, argc, argv);
    }
    free(request.data);

    int32_t status;
    size_t got = 0;
    while (got < sizeof status) {
        ssize_t n = recv(sock, (char *)&status + got, sizeof status - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            fprintf(stderr, "%s: the node's command server ended without a status\n", command);
            return 1;
        }
        got += (size_t)n;
    }
    close(sock);
    if (status == FALLBACK) fallback(command, argc, argv);
    return status & 0xff;
}
