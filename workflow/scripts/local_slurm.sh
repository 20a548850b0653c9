#!/bin/sh
# A throwaway one-node SLURM cluster on this machine, to run `snakemake --profile workflow/profiles/slurm`
# against real daemons (tests/workflow/test_slurm.py uses it). Not for a real cluster.
#
#   workflow/scripts/local_slurm.sh start    install slurm-wlm + munge if missing (apt), start munged,
#                                            slurmctld and slurmd, wait until the node is idle
#   workflow/scripts/local_slurm.sh status   the daemons' PIDs and `sinfo`
#   workflow/scripts/local_slurm.sh stop     kill the daemons by the PIDs `start` recorded
#
# Needs root and Debian packages (Debian 12: slurm 22.05). Exit code 3: this machine cannot run it (not
# root, no apt-get, the packages would not install); the message says why. Everything the cluster writes
# (config, state, logs, PIDs) is under $ORCHESTRY_SLURM_DIR (default /tmp/orchestry-slurm); the clients
# (sbatch, squeue, and srun inside a job) find the config through symlinks in /etc/slurm, which `start`
# makes only where no other slurm.conf is (or only this script's link to a cluster no longer running, as
# a killed test run leaves it) and `stop` removes.
set -eu

STATE=${ORCHESTRY_SLURM_DIR:-/tmp/orchestry-slurm}
ETC=/etc/slurm
PIDS=$STATE/pids
MARK="# written by workflow/scripts/local_slurm.sh"

cannot() { echo "local_slurm.sh: cannot run a local SLURM here: $*" >&2; exit 3; }
fail() { echo "local_slurm.sh: $*" >&2; exit 1; }

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

recorded_pid() { # recorded_pid NAME -> the PID `start` recorded for that daemon, or nothing
    if [ -f "$PIDS" ]; then sed -n "s/^$1 //p" "$PIDS"; fi
}

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
        && command -v sbatch >/dev/null; then
        return
    fi
    command -v apt-get >/dev/null || cannot "slurm-wlm and munge are not installed and there is no apt-get"
    echo "installing slurm-wlm and munge (apt-get)" >&2
    apt-get update -qq >&2 || cannot "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >&2 \
        || cannot "apt-get install slurm-wlm munge failed"
}

write_config() {
    host=$(hostname)
    # the node as slurmd sees it (real CPUs, sockets, cores, memory); only its first line is the node
    node=$(slurmd -C | head -n 1)
    case "$node" in NodeName=*) ;; *) fail "slurmd -C printed no node line: $node" ;; esac
    cat >"$STATE/slurm.conf" <<EOF
$MARK: a one-node test cluster
ClusterName=orchestry
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge/munge.socket
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
# no cgroups in a container: track processes by parent PID, bind no tasks
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# no slurmdbd, so no sacct: finished jobs are kept in slurmctld (MinJobAge, seconds) for squeue and
# scontrol, and each one is written to jobcomp.log
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/jobcomp.log
MinJobAge=3600
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
# a count-only GPU (no device file): the profile's gpu resources are schedulable on a node without one
GresTypes=gpu
$node Gres=gpu:1 State=UNKNOWN
PartitionName=cpu Nodes=$host Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$host MaxTime=INFINITE State=UP
EOF
    cat >"$STATE/gres.conf" <<EOF
$MARK
NodeName=$host Name=gpu Count=1 File=/dev/null
EOF
}

stale_link() { # stale_link PATH: a link this script made for another cluster, whose slurmctld is gone
    target=$(readlink "$1" || true)
    [ -n "$target" ] || return 1
    head -n 1 "$target" 2>/dev/null | grep -q "^$MARK" || return 1
    ! alive "$(sed -n 's/^slurmctld //p' "$(dirname "$target")/pids" 2>/dev/null || true)"
}

link_config() { # the clients read $ETC/slurm.conf; never replace a config this script did not write
    mkdir -p "$ETC"
    for name in slurm.conf gres.conf; do
        if [ -e "$ETC/$name" ] && [ "$(readlink "$ETC/$name" || true)" != "$STATE/$name" ]; then
            if stale_link "$ETC/$name"; then  # left by a run killed before `stop`
                echo "replacing $ETC/$name -> $(readlink "$ETC/$name") (its cluster is not running)" >&2
            else
                cannot "$ETC/$name exists and is not this script's; stop that cluster or move the file"
            fi
        fi
        ln -sfn "$STATE/$name" "$ETC/$name"
    done
}

start_daemon() { # start_daemon NAME COMMAND...: run in the foreground mode, detached, PID recorded
    name=$1
    shift
    setsid "$@" </dev/null >>"$STATE/$name.out" 2>&1 &
    echo "$name $!" >>"$PIDS"
}

wait_until_idle() {
    host=$(hostname)
    i=0
    while [ $i -lt 60 ]; do
        state=$(sinfo -h -N -n "$host" -o %T 2>/dev/null | head -n 1 || true)
        case "$state" in idle*) echo "local SLURM up: node $host idle, partitions cpu and gpu" >&2; return ;; esac
        for name in munged slurmctld slurmd; do
            alive "$(recorded_pid $name)" || fail "$name exited; see $STATE/$name.out and $STATE/*.log"
        done
        sleep 1
        i=$((i + 1))
    done
    fail "node $host not idle after 60 s (state: ${state:-none}); see $STATE/slurmctld.log and slurmd.log"
}

start() {
    [ "$(id -u)" -eq 0 ] || cannot "needs root (installs packages, runs slurmd and munged as root)"
    if alive "$(recorded_pid slurmctld)"; then
        echo "local SLURM already running (PIDs in $PIDS)" >&2
        return
    fi
    install_packages
    rm -rf "$STATE"  # a fresh cluster: no jobs or node state from an earlier run
    mkdir -p "$STATE/munge" "$STATE/slurmctld" "$STATE/slurmd"
    chmod 700 "$STATE/munge"
    : >"$PIDS"
    write_config
    link_config
    mungekey --create --keyfile="$STATE/munge/munge.key" >/dev/null 2>&1 \
        || dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 2>/dev/null
    chmod 400 "$STATE/munge/munge.key"
    start_daemon munged munged --foreground --force --socket="$STATE/munge/munge.socket" \
        --key-file="$STATE/munge/munge.key" --pid-file="$STATE/munge/munged.pid" \
        --log-file="$STATE/munge/munged.log" --seed-file="$STATE/munge/munged.seed"
    i=0
    until [ -S "$STATE/munge/munge.socket" ]; do
        alive "$(recorded_pid munged)" || fail "munged exited; see $STATE/munged.out"
        [ $i -lt 20 ] || fail "munged opened no socket in 10 s; see $STATE/munged.out"
        sleep 0.5
        i=$((i + 1))
    done
    start_daemon slurmctld slurmctld -D -i -f "$STATE/slurm.conf"
    start_daemon slurmd slurmd -D -f "$STATE/slurm.conf"
    wait_until_idle
}

status() {
    for name in munged slurmctld slurmd; do
        pid=$(recorded_pid $name)
        if alive "$pid"; then echo "$name: running (PID $pid)"; else echo "$name: not running"; fi
    done
    if alive "$(recorded_pid slurmctld)"; then sinfo; fi
}

cancel_jobs() { # a job step outlives slurmd: cancel the jobs while slurmd can still end them
    jobs=$(squeue -h -o %i -t PENDING,RUNNING,SUSPENDED,COMPLETING 2>/dev/null || true)
    [ -n "$jobs" ] || return 0
    # shellcheck disable=SC2086  # one job id per word
    scancel $jobs || true
    i=0
    while [ -n "$(squeue -h -o %i -t RUNNING,COMPLETING 2>/dev/null || true)" ] && [ $i -lt 30 ]; do
        sleep 1
        i=$((i + 1))
    done
}

stop() {
    if alive "$(recorded_pid slurmctld)" && alive "$(recorded_pid slurmd)"; then cancel_jobs; fi
    for name in slurmd slurmctld munged; do
        pid=$(recorded_pid $name)
        alive "$pid" && kill "$pid"
    done
    for name in slurmd slurmctld munged; do
        pid=$(recorded_pid $name)
        i=0
        while alive "$pid" && [ $i -lt 20 ]; do sleep 0.5; i=$((i + 1)); done
        if alive "$pid"; then kill -9 "$pid"; fi
    done
    [ -f "$PIDS" ] && : >"$PIDS"
    for name in slurm.conf gres.conf; do
        if [ "$(readlink "$ETC/$name" || true)" = "$STATE/$name" ]; then rm -f "$ETC/$name"; fi
    done
    echo "local SLURM stopped (logs kept in $STATE)" >&2
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
