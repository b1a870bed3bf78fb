"""The helper process of `cohort.coordinator.log.fsync_process`: fdatasync on request, report errno and time.

Run as a script (``python -I fsync_child.py FD``) so it imports nothing but the
standard library.  FD is its end of a SOCK_SEQPACKET socketpair.  Each request
is one message; a request that carries a file descriptor (SCM_RIGHTS) makes it
the file to sync from then on.  Each reply is ``<i q`` = (errno or 0,
nanoseconds the fdatasync took).  It exits when the coordinator's end closes,
which also happens when the coordinator is killed.
"""
import os
import socket
import struct
import sys
import time

REPLY = struct.Struct("<iq")


def main(sock_fd: int) -> None:
    sock = socket.socket(fileno=sock_fd)
    current = -1
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 16, 1)
        except (ConnectionError, OSError):
            return
        if not message:
            return
        if fds:
            if current >= 0:
                os.close(current)
            current = fds[0]
        started = time.perf_counter_ns()
        try:
            os.fdatasync(current)
            errno = 0
        except OSError as exc:
            errno = exc.errno or 5
        try:
            sock.send(REPLY.pack(errno, time.perf_counter_ns() - started))
        except (ConnectionError, OSError):
            return


if __name__ == "__main__":
    main(int(sys.argv[1]))
