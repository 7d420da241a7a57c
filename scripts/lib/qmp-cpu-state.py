#!/usr/bin/env python3
"""Saves the CPU state of a QEMU that seems frozen, through its QMP socket.

Usage: qmp-cpu-state.py SOCKET OUT [SNAPSHOTS]

Writes SNAPSHOTS (default 2) rounds of `info cpus` and `info registers -a`,
one second apart, to OUT: a vCPU whose RIP never moves is stuck in a loop
or halted with interrupts off; one whose RIP moves is live-locked. Every
socket operation is bounded; exits 1 with a message when QEMU does not
answer (it may be the emulator itself that is stuck). Prints one digest
line for the failure summary: per CPU, RIP in each round, CPL and HLT.
"""
import json
import re
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


CPU_RE = re.compile(r"^CPU#(\d+)", re.M)
RIP_RE = re.compile(r"RIP=([0-9a-f]+) .*?CPL=(\d).*?HLT=(\d)")


def digest(rounds):
    """'cpu0 rip A,B cpl0 hlt0; cpu1 ...' from the `info registers -a` texts."""
    cpus = {}
    for text in rounds:
        parts = CPU_RE.split(text)
        for num, body in zip(parts[1::2], parts[2::2]):
            m = RIP_RE.search(body)
            if m:
                cpus.setdefault(int(num), []).append(m.groups())
    out = []
    for num, seen in sorted(cpus.items()):
        rips = ",".join(r for r, _, _ in seen)
        moved = "moves" if len({r for r, _, _ in seen}) > 1 else "stays"
        out.append(f"cpu{num} rip {rips} ({moved}) cpl{seen[-1][1]} hlt{seen[-1][2]}")
    return "; ".join(out)


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    path, out = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    regs = []
    try:
        qmp = Qmp(path)
        with open(out, "w") as f:
            for i in range(rounds):
                if i:
                    time.sleep(1)
                f.write(f"=== snapshot {i + 1} at {time.strftime('%H:%M:%S')}\n")
                f.write(qmp.hmp("info cpus"))
                regs.append(qmp.hmp("info registers -a"))
                f.write(regs[-1])
    except (OSError, ValueError, RuntimeError) as e:
        print(f"qmp-cpu-state: no CPU state from {path}: {e}", file=sys.stderr)
        return 1
    print(digest(regs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
