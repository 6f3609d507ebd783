#!/usr/bin/env bash
# Stop the local test Slurm started by slurm-up.sh. `--purge` also deletes its state and database,
# so the next slurm-up.sh starts from nothing.
set -euo pipefail

STATE=/var/lib/gpu-governance-slurm

stop_pidfile() {
    local pidfile=$1 pid
    [[ -f $pidfile ]] || return 0
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for ((i = 0; i < 40; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
    rm -f "$pidfile"
}

for pidfile in "$STATE"/run/slurmd-*.pid; do stop_pidfile "$pidfile"; done
stop_pidfile "$STATE/run/slurmctld.pid"
stop_pidfile "$STATE/run/slurmdbd.pid"
stop_pidfile "$STATE/mysql/mariadb.pid"

if [[ ${1:-} == --purge ]]; then
    rm -rf "$STATE"
    rm -f /etc/slurm/slurm.conf /etc/slurm/gres.conf /etc/slurm/slurmdbd.conf /etc/slurm/gpu-governance.conf
fi
echo "slurm-down: stopped${1:+ and purged}" >&2
