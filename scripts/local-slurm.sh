#!/usr/bin/env bash
# A real SLURM cluster on this machine, from Debian's packages, for the SLURM
# end-to-end tests and CI: one node, or several nodes as several slurmd on this
# one host.
#
#   scripts/local-slurm.sh install              apt-get install the daemons and clients if missing
#   scripts/local-slurm.sh up DIR [--nodes N]   install if missing, start munged, slurmctld and one slurmd
#                                               per node (N > 1: nodes n1..nN, slurmd ports 17001...);
#                                               wait until every node is idle; print `export SLURM_CONF=...`
#                                               (/etc/slurm/slurm.conf links to DIR's config while it runs)
#   scripts/local-slurm.sh down DIR             stop the daemons this script started in DIR
#
# Everything (config, state, spool, logs, pid files) lives in DIR. Needs root
# (apt, munge, slurmd). Each of N nodes declares all of this host's CPUs (the
# partition oversubscribes); a job sees the node it runs on in SLURMD_NODENAME.
set -euo pipefail

die() { echo "local-slurm: error: $*" >&2; exit 1; }

install_packages() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        && command -v munged >/dev/null && return
    echo "local-slurm: installing slurmctld slurmd slurm-client munge" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurmctld slurmd slurm-client munge >&2 \
        || die "apt-get install slurmctld slurmd slurm-client munge failed (root and Debian's package registry needed)"
}

start_munge() {
    local dir=$1
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi  # a working munged is already there
    install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
    install -d -o munge -g munge -m 0755 /run/munge
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        chown munge:munge /etc/munge/munge.key
        chmod 0400 /etc/munge/munge.key
    fi
    runuser -u munge -- munged
    touch "$dir/started-munged"
}

node_names() {
    local nodes=$1
    if [ "$nodes" -eq 1 ]; then hostname -s; else seq -f 'n%g' 1 "$nodes"; fi
}

write_conf() {
    local dir=$1 nodes=$2 host mem names k=0 name
    host=$(hostname -s)
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 / nodes ))
    names=$(node_names "$nodes" | paste -sd,)
    mkdir -p "$dir/state" "$dir/spool"
    cat > "$dir/slurm.conf" <<EOF
ClusterName=scalerepro
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=10
EOF
    for name in $(node_names "$nodes"); do
        k=$((k + 1))
        if [ "$nodes" -eq 1 ]; then
            echo "NodeName=$name NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem State=UNKNOWN"
        else
            echo "NodeName=$name NodeHostname=$host NodeAddr=127.0.0.1 Port=$((17000 + k)) CPUs=$(nproc)" \
                 "RealMemory=$mem State=UNKNOWN"
        fi
    done >> "$dir/slurm.conf"
    echo "PartitionName=debug Nodes=$names Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES" >> "$dir/slurm.conf"
}

up() {
    local dir=$1 nodes=$2 name idle
    [[ "$nodes" =~ ^[1-9][0-9]*$ ]] || die "--nodes $nodes: expected a positive whole number"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    install_packages
    if pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null; then
        die "slurmctld/slurmd already running (pids $(pgrep -d, -x 'slurmctld|slurmd')); stop that cluster first"
    fi
    start_munge "$dir"
    write_conf "$dir" "$nodes"
    # Jobs see the cluster through the default path: Snakemake's jobstep strips SLURM_* (SLURM_CONF too).
    if [ -e /etc/slurm/slurm.conf ] && [ ! -L /etc/slurm/slurm.conf ]; then
        die "/etc/slurm/slurm.conf exists and is not ours; this script will not replace a real cluster's config"
    fi
    mkdir -p /etc/slurm
    ln -sfn "$dir/slurm.conf" /etc/slurm/slurm.conf
    export SLURM_CONF=$dir/slurm.conf
    slurmctld -f "$SLURM_CONF"
    for name in $(node_names "$nodes"); do
        mkdir -p "$dir/spool/$name"
        if [ "$nodes" -eq 1 ]; then slurmd -f "$SLURM_CONF"; else slurmd -f "$SLURM_CONF" -N "$name"; fi
    done
    for _ in $(seq 60); do
        idle=$(sinfo -h -N -o '%N %T' 2>/dev/null | awk '$2 == "idle"' | wc -l)
        if [ "$idle" -eq "$nodes" ]; then
            echo "export SLURM_CONF=$SLURM_CONF"
            return
        fi
        sleep 0.5
    done
    sinfo -N >&2 || true
    tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd.*.log >&2 || true
    down "$dir"
    die "$nodes node(s) did not all become idle within 30 s (logs above, in $dir)"
}

down() {
    local dir=$1 pidfile pid
    for pidfile in "$dir"/slurmd.*.pid "$dir/slurmctld.pid"; do
        [ -s "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        kill -9 "$pid" 2>/dev/null || true
    done
    if [ "$(readlink /etc/slurm/slurm.conf 2>/dev/null)" = "$dir/slurm.conf" ]; then
        rm -f /etc/slurm/slurm.conf
    fi
    if [ -e "$dir/started-munged" ]; then
        pkill -x munged || true
        rm -f "$dir/started-munged"
    fi
}

case "${1:-}" in
    install) install_packages ;;
    up)
        [ -n "${2:-}" ] || die "usage: $0 up DIR [--nodes N]"
        case "${3:-}" in
            "") up "$2" 1 ;;
            --nodes) [ -n "${4:-}" ] || die "usage: $0 up DIR --nodes N"; up "$2" "$4" ;;
            *) die "unknown option ${3}; usage: $0 up DIR [--nodes N]" ;;
        esac ;;
    down) [ -n "${2:-}" ] || die "usage: $0 down DIR"; down "$2" ;;
    *) echo "usage: $0 install | up DIR [--nodes N] | down DIR" >&2; exit 2 ;;
esac
