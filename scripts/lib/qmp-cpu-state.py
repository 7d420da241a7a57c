#!/usr/bin/env python3
"""Saves the CPU state of a QEMU that seems frozen, through its QMP socket.

Usage: qmp-cpu-state.py SOCKET OUT [SNAPSHOTS]

Writes SNAPSHOTS (default 2) rounds of `info cpus` and `info registers -a`,
one second apart, to OUT: a vCPU whose RIP never moves is stuck in a loop
or halted with interrupts off; one whose RIP moves is live-locked. Every
socket operation is bounded; exits 1 with a message when QEMU does not
answer (it may be the emulator itself that is stuck).
"""
import json
import socket
import sys
import time

TIMEOUT_S = 5.0


class Qmp:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT_S)
        self.sock.connect(path)
        self.buf = b""
        self.reply()  # the greeting
        self.command("qmp_capabilities")

    def reply(self):
        while True:
            line, sep, rest = self.buf.partition(b"\n")
            if sep:
                self.buf = rest
                msg = json.loads(line)
                if "event" in msg:
                    continue
                return msg
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("QEMU closed the QMP socket")
            self.buf += chunk

    def command(self, name, **args):
        self.sock.sendall(json.dumps({"execute": name, "arguments": args}).encode() + b"\n")
        msg = self.reply()
        if "error" in msg:
            raise RuntimeError(f"{name}: {msg['error']}")
        return msg.get("return")

    def hmp(self, line):
        return self.command("human-monitor-command", **{"command-line": line})


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    path, out = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    try:
        qmp = Qmp(path)
        with open(out, "w") as f:
            for i in range(rounds):
                if i:
                    time.sleep(1)
                f.write(f"=== snapshot {i + 1} at {time.strftime('%H:%M:%S')}\n")
                f.write(qmp.hmp("info cpus"))
                f.write(qmp.hmp("info registers -a"))
    except (OSError, ValueError, RuntimeError) as e:
        print(f"qmp-cpu-state: no CPU state from {path}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
