#!/bin/sh
# group-report.sh PGID: one line per process of process group PGID: pid,
# state, kernel wait channel and command line. l1-init.sh prints it before
# it kills a scenario that ran out of time, so the log names what hung.
pgid=${1:?usage: group-report.sh PGID}
echo "@@TB HUNG-GROUP $pgid:"
for st in /proc/[0-9]*/stat; do
    d=${st%/stat}
    # Fields after the command name: state ppid pgrp ...
    # shellcheck disable=SC2046 # word splitting of the stat fields is wanted
    set -- $(sed 's/.*) //' "$st" 2>/dev/null)
    [ "${3:-}" = "$pgid" ] || continue
    echo "  pid ${d#/proc/} state=$1 wchan=$(cat "$d/wchan" 2>/dev/null)" \
        "$(tr '\000' ' ' <"$d/cmdline" 2>/dev/null | cut -c1-200)"
done
