"""Prints one JSON line of N bytes of payload: ``python _print_line.py N`` (for sessions.py)."""

import sys

size = int(sys.argv[1])
out = sys.stdout.buffer
out.write(b'{"type": "system", "blob": "')
chunk = b"x" * (1 << 20)
while size > 0:
    out.write(chunk[: min(size, len(chunk))])
    size -= len(chunk)
out.write(b'"}\n')
out.flush()
