#!/usr/bin/env bash
# Start a real Slurm with accounting on this machine for the `slurm` test suite.
#
# Three emulated GPU nodes (gres/gpu backed by placeholder devices) on localhost, slurmctld, slurmdbd and a
# private MariaDB instance, all started directly in the background (no systemd here). Safe to run
# again: it installs what is missing, rewrites the configuration only when it changed and starts
# only the daemons that are not answering. Run as root; `slurm-down.sh` stops everything.
set -euo pipefail

STATE=/var/lib/gpu-governance-slurm
CONF_DIR=/etc/slurm
NODES=(gpu-1 gpu-2 gpu-3)
NODE_RANGE="gpu-[1-3]"
GPUS_PER_NODE=4
CPUS_PER_NODE=8
DB_PORT=3307
DB_SOCKET="$STATE/mysql/mysqld.sock"
PACKAGES=(slurmctld slurmd slurmdbd slurm-client munge mariadb-server)

log() { echo "slurm-up: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[[ $EUID -eq 0 ]] || die "must run as root (it installs packages and starts daemons)"

install_packages() {
    local missing=()
    for pkg in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    ((${#missing[@]} == 0)) && return
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Keep the packages' maintainer scripts from starting daemons with their stock configuration
    # (this script starts them with its own); a policy already in place is left as it is.
    local policy=/usr/sbin/policy-rc.d
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Write a file only when its content differs, so a second run does not touch running daemons.
# Prints "changed" when it wrote.
write_if_changed() {
    local path=$1 owner=$2 mode=$3 content
    content=$(cat)
    if [[ -f $path ]] && [[ "$(cat "$path")" == "$content" ]]; then
        return
    fi
    printf '%s\n' "$content" >"$path"
    chown "$owner" "$path"
    chmod "$mode" "$path"
    echo changed
}

write_configs() {
    local changed=""
    mkdir -p "$CONF_DIR"
    changed+=$(write_if_changed "$CONF_DIR/slurm.conf" root:root 644 <<EOF
# Written by tests/slurm/slurm-up.sh (cdk-gpu-governance test cluster). Do not edit by hand.
ClusterName=gpu-governance-test
SlurmctldHost=localhost
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d/%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
# The emulated nodes claim more CPUs than this machine has; slurmd must accept that.
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
# Accounting: limits and QoS are enforced, GPUs are a tracked TRES (the governance is in GPUs).
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageEnforce=associations,limits,qos,safe
AccountingStorageTRES=gres/gpu
PriorityType=priority/multifactor
PriorityWeightQOS=100000
PriorityWeightFairshare=10000
PriorityWeightAge=100
PriorityDecayHalfLife=1-0
# Preemption by QoS relation, preempted jobs go back to the queue.
PreemptType=preempt/qos
PreemptMode=REQUEUE
PreemptExemptTime=0
# Short intervals so preemption and requeue happen within seconds in tests.
SchedulerParameters=sched_interval=2,sched_min_interval=100000,bf_interval=1,defer_batch
SchedulerTimeSlice=5
KillWait=2
MinJobAge=300
InactiveLimit=0
Waittime=0
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
NodeName=DEFAULT CPUs=$CPUS_PER_NODE RealMemory=1000 Gres=gpu:$GPUS_PER_NODE State=UNKNOWN
$(port=6821; for n in "${NODES[@]}"; do echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$port"; port=$((port + 1)); done)
# Administrators only: tenants reach the nodes through the governance partitions alone.
PartitionName=all Nodes=$NODE_RANGE Default=YES MaxTime=INFINITE AllowAccounts=root State=UP
Include $CONF_DIR/gpu-governance.conf
EOF
)
    # The governance generator owns this fragment; an empty one keeps the Include valid.
    [[ -s $CONF_DIR/gpu-governance.conf ]] || { echo "# no governance applied yet" >"$CONF_DIR/gpu-governance.conf"; changed+=changed; }
    changed+=$(write_if_changed "$CONF_DIR/gres.conf" root:root 644 <<EOF
# Emulated GPUs. Slurm 22.05 drops GPUs that have no File=, so each one names a placeholder
# character device (an alias of /dev/null); nothing ever opens them.
NodeName=$NODE_RANGE Name=gpu File=$STATE/fake-gpu/gpu[0-$((GPUS_PER_NODE - 1))]
EOF
)
    changed+=$(write_if_changed "$CONF_DIR/slurmdbd.conf" slurm:slurm 600 <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=slurm
PidFile=$STATE/run/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm-test-only
StorageLoc=slurm_acct_db
EOF
)
    [[ -n $changed ]] && echo changed || true
}

prepare_dirs() {
    mkdir -p "$STATE"/{ctld,run,log,mysql,fake-gpu} /run/munge
    for ((i = 0; i < GPUS_PER_NODE; i++)); do
        [[ -c $STATE/fake-gpu/gpu$i ]] || mknod -m 666 "$STATE/fake-gpu/gpu$i" c 1 3
    done
    for n in "${NODES[@]}"; do mkdir -p "$STATE/d/$n"; done
    chown -R slurm:slurm "$STATE/ctld" "$STATE/run" "$STATE/log"
    chown mysql:mysql "$STATE/mysql"
    chown munge:munge /run/munge
    # slurmd writes its pid and log as root into the same directories.
    chmod 1777 "$STATE/run" "$STATE/log"
}

# alive PIDFILE COMMAND: the pid file names a live process running COMMAND. A pid file left by an
# earlier machine run can name a pid the kernel has since given to another process.
alive() {
    [[ -f $1 ]] || return 1
    local pid
    pid=$(cat "$1")
    kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2"
}

wait_for() {
    local what=$1 seconds=$2; shift 2
    for ((i = 0; i < seconds * 4; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.25
    done
    die "$what not ready after ${seconds}s (logs in $STATE/log)"
}

start_munge() {
    [[ -s /etc/munge/munge.key ]] || { mungekey --create --keyfile=/etc/munge/munge.key; chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
    if ! munge -n </dev/null >/dev/null 2>&1; then
        log "starting munged"
        runuser -u munge -- /usr/sbin/munged --force
    fi
    wait_for munge 15 bash -c 'munge -n | unmunge'
}

start_mariadb() {
    if [[ ! -d $STATE/mysql/mysql ]]; then
        log "initialising MariaDB in $STATE/mysql"
        mariadb-install-db --user=mysql --datadir="$STATE/mysql" --auth-root-authentication-method=socket \
            --skip-test-db >"$STATE/log/mariadb-install.log" 2>&1
    fi
    if ! mariadb-admin --socket="$DB_SOCKET" ping >/dev/null 2>&1; then
        log "starting MariaDB on 127.0.0.1:$DB_PORT"
        # innodb_lock_wait_timeout: slurmdbd's recommended value; small buffer pool for a test box.
        setsid mariadbd --user=mysql --datadir="$STATE/mysql" --socket="$DB_SOCKET" --port=$DB_PORT \
            --bind-address=127.0.0.1 --pid-file="$STATE/mysql/mariadb.pid" \
            --log-error="$STATE/log/mariadb.log" --innodb-buffer-pool-size=64M \
            --innodb-lock-wait-timeout=900 </dev/null >/dev/null 2>&1 &
    fi
    wait_for MariaDB 60 mariadb-admin --socket="$DB_SOCKET" ping
    mariadb --socket="$DB_SOCKET" <<'EOF'
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm-test-only';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm-test-only';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
EOF
}

start_slurmdbd() {
    if ! alive "$STATE/run/slurmdbd.pid" slurmdbd; then
        log "starting slurmdbd"
        runuser -u slurm -- /usr/sbin/slurmdbd
    fi
    wait_for slurmdbd 60 sacctmgr -n list cluster
}

register_cluster() {
    sacctmgr -n -P list cluster format=cluster | grep -qx gpu-governance-test \
        || sacctmgr -i add cluster gpu-governance-test >/dev/null
}

start_slurmctld() {
    local config_changed=$1
    if alive "$STATE/run/slurmctld.pid" slurmctld; then
        [[ -n $config_changed ]] && { log "reconfiguring slurmctld"; scontrol reconfigure; }
    else
        log "starting slurmctld"
        runuser -u slurm -- /usr/sbin/slurmctld
    fi
    wait_for slurmctld 60 scontrol ping
}

start_slurmds() {
    for n in "${NODES[@]}"; do
        if ! alive "$STATE/run/slurmd-$n.pid" "slurmd -N $n "; then
            log "starting slurmd $n"
            /usr/sbin/slurmd -N "$n"
        fi
    done
}

nodes_idle() {
    local states
    states=$(sinfo -h -N -p all -o '%N %t' | sort -u)
    [[ $(grep -c -E ' (idle|mix|alloc)$' <<<"$states") -eq ${#NODES[@]} ]]
}

main() {
    install_packages
    prepare_dirs
    local config_changed
    config_changed=$(write_configs)
    start_munge
    start_mariadb
    start_slurmdbd
    register_cluster
    start_slurmctld "$config_changed"
    start_slurmds
    # A node left DOWN or DRAINED by an earlier unclean stop would wait for ReturnToService;
    # resuming it explicitly makes a re-run converge at once.
    local stuck
    stuck=$(sinfo -h -N -t down,drain,drained -o '%N' | sort -u | paste -sd, -)
    [[ -z $stuck ]] || scontrol update NodeName="$stuck" State=RESUME
    wait_for "idle nodes" 60 nodes_idle
    sacctmgr -n list cluster >/dev/null || die "sacctmgr does not answer"
    log "up: $(sinfo -h -o '%P %D %t %G' | tr '\n' ';')"
}

main "$@"
