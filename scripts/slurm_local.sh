#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine, for the cluster test and for trying
# profiles/slurm by hand:   scripts/slurm_local.sh up | down | status
#
#   up      install the Debian packages if missing (slurmctld, slurmd, slurm-client, munge),
#           write /etc/slurm/slurm.conf and gres.conf (one fake GPU), start munged,
#           slurmctld and slurmd as root without systemd, wait until the node is idle
#   down    stop the three daemons and remove their state, the config files this script
#           wrote and the fake GPU device
#   status  what runs, and the node as sinfo sees it; exit 0 when the cluster is up
#
# Both up and down are idempotent.  Needs root (the daemons, /etc/slurm, mknod).  No
# systemd: process tracking by /proc (proctrack/linuxproc), no task binding (task/none).
# No slurmdbd: jobs stay visible to squeue/scontrol for MinJobAge after they end, which
# the snakemake executor plugin reads their final state from.  The config lives at
# /etc/slurm/slurm.conf because the plugin's job step (srun inside the batch job) does
# not pass SLURM_CONF on.  The fake GPU is a character device (/dev/null's numbers)
# declared as gres gpu:1: it makes `--gpus=1` schedulable; nothing can compute on it.
set -euo pipefail

CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
GRES_CONF=$CONF_DIR/gres.conf
STATE=/var/lib/ssmbench-slurm          # slurmctld's state, slurmd's spool, logs, pids
FAKE_GPU=/dev/ssmbench-fakegpu0
PARTITION=${SSMBENCH_SLURM_PARTITION:-ssmbench}
MARK="# written by ssm-bench scripts/slurm_local.sh"   # a config without it is not ours
UP_TIMEOUT_S=${SLURM_LOCAL_UP_TIMEOUT_S:-60}
PACKAGES=(slurmctld slurmd slurm-client munge)

say() { echo "slurm_local: $*"; }
die() { echo "slurm_local: error: $*" >&2; exit 1; }

need_root() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (it starts the SLURM daemons and writes $CONF_DIR)"
}

# pid of a daemon from its pid file, if that process is alive (a zombie, killed but not yet
# reaped, is not)
alive() {
    local pidfile=$1 pid state
    [[ -s $pidfile ]] || return 1
    pid=$(<"$pidfile")
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
    [[ -n $state && $state != Z ]] && echo "$pid"
}

install_packages() {
    local missing=()
    for pkg in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$pkg")
    done
    ((${#missing[@]} == 0)) && return 0
    command -v apt-get >/dev/null || die "packages ${missing[*]} missing and no apt-get to install them"
    say "installing ${missing[*]}"
    # (their postinst scripts try to start systemd units; without systemd that only warns)
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null || die "apt-get update failed"
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
        || die "apt-get install ${missing[*]} failed"
}

write_config() {
    if [[ -e $CONF ]] && ! grep -qF "$MARK" "$CONF"; then
        die "$CONF exists and was not written by this script; refusing to overwrite a real cluster's config"
    fi
    mkdir -p "$CONF_DIR" "$STATE"/{ctld,spool,log}
    [[ -c $FAKE_GPU ]] || mknod -m 666 "$FAKE_GPU" c 1 3
    # this machine as slurmd detects it: NodeName, CPUs, sockets, cores, RealMemory
    local node
    node=$(slurmd -C | head -1)
    [[ $node == NodeName=* ]] || die "slurmd -C printed no node line: $node"
    local host=${node%% *}
    host=${host#NodeName=}
    cat >"$CONF" <<EOF
$MARK: a single-node cluster for tests
ClusterName=ssmbench
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
# no systemd, no cgroups: track processes through /proc, bind no tasks
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
# cores and memory are what a job asks for; a job that names no memory gets this per core
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
# without slurmdbd, a finished job's state is known only while slurmctld keeps it
MinJobAge=3600
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
GresTypes=gpu
$node Gres=gpu:1 State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$GRES_CONF" <<EOF
$MARK: the fake GPU (a character device), scheduling only
NodeName=$host Name=gpu File=$FAKE_GPU
EOF
}

start_munge() {
    if pgrep -x munged >/dev/null; then return 0; fi
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge /etc/munge
    if [[ ! -s /etc/munge/munge.key ]]; then
        runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
    fi
    runuser -u munge -- /usr/sbin/munged || die "munged did not start (see /var/log/munge/munged.log)"
    touch "$STATE/munged.ours" # so down stops only a munged that up started
    munge -n | unmunge >/dev/null || die "munge cannot encode and decode a credential"
}

start_daemons() {
    alive "$STATE/slurmctld.pid" >/dev/null || slurmctld \
        || die "slurmctld did not start (see $STATE/log/slurmctld.log)"
    alive "$STATE/slurmd.pid" >/dev/null || slurmd \
        || die "slurmd did not start (see $STATE/log/slurmd.log)"
}

node_state() { sinfo -h -N -o '%t' 2>/dev/null | head -1; }

wait_idle() {
    local waited=0 state
    while ((waited < UP_TIMEOUT_S)); do
        state=$(node_state)
        case $state in
        idle | mix | alloc) return 0 ;;
        drain* | down* | inval*)
            # a node that was down when the daemons last stopped: put it back once
            scontrol update nodename="$(sinfo -h -N -o '%N' | head -1)" state=resume 2>/dev/null || true
            ;;
        esac
        sleep 1
        waited=$((waited + 1))
    done
    die "the node is not idle after ${UP_TIMEOUT_S} s (sinfo: '${state:-no answer}'; logs in $STATE/log/)"
}

up() {
    need_root
    install_packages
    write_config
    start_munge
    start_daemons
    wait_idle
    say "up: partition $PARTITION, node $(sinfo -h -N -o '%N %c CPUs %m MB %G %t' | head -1)"
}

stop_pidfile() {
    local name=$1 pidfile=$2 pid
    pid=$(alive "$pidfile") || return 0
    kill "$pid"
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.2
    done
    say "$name ($pid) did not stop in 10 s; killing it"
    kill -9 "$pid" 2>/dev/null || true
}

down() {
    need_root
    # jobs first, so no job's processes outlive the daemons
    if alive "$STATE/slurmctld.pid" >/dev/null; then scancel --full --quiet --user=root 2>/dev/null || true; fi
    stop_pidfile slurmd "$STATE/slurmd.pid"
    stop_pidfile slurmctld "$STATE/slurmctld.pid"
    if [[ -e $STATE/munged.ours ]]; then stop_pidfile munged /run/munge/munged.pid; fi
    rm -rf "$STATE"
    for file in "$CONF" "$GRES_CONF"; do
        if [[ -e $file ]] && grep -qF "$MARK" "$file"; then rm -f "$file"; fi
    done
    rm -f "$FAKE_GPU"
    say "down"
}

status() {
    local running=0
    for daemon in munged slurmctld slurmd; do
        local pidfile=$STATE/$daemon.pid
        [[ $daemon == munged ]] && pidfile=/run/munge/munged.pid
        if pid=$(alive "$pidfile"); then
            say "$daemon running (pid $pid)"
        else
            say "$daemon not running"
            running=1
        fi
    done
    if ((running == 0)); then
        sinfo -N -o '%N %P %c %m %G %t'
        [[ $(node_state) =~ ^(idle|mix|alloc)$ ]] || running=1
    fi
    return $running
}

case ${1:-} in
up) up ;;
down) down ;;
status) status ;;
*)
    echo "usage: $0 up|down|status" >&2
    exit 2
    ;;
esac
