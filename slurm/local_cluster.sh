#!/usr/bin/env bash
# A one-node Slurm cluster on localhost, for tests and for trying sweeps before a real cluster.
#
#   eval "$(slurm/local_cluster.sh up)"   # start (installs Debian packages when missing, as root)
#   slurm/local_cluster.sh status          # exit 0 when the whole stack is up
#   slurm/local_cluster.sh down [--wipe]   # stop what `up` started (and delete all state)
#
# `up` prints only the `export SLURM_CONF=...` line on stdout; everything else goes to stderr.
#
# Environment:
#   RLSWEEP_SLURM_DIR      state folder (default /tmp/rlsweep-slurm): configs, keys, database,
#                          spool, logs, pidfiles -- nothing is written elsewhere
#   RLSWEEP_SLURM_DB_PORT  port of the private MariaDB on 127.0.0.1 (default 3307)
#   RLSWEEP_SLURM_PORT     slurmctld port; slurmd and slurmdbd use the next two (default 6817)
#   RLSWEEP_SLURM_TIMEOUT  seconds to wait for each readiness step (default 60)
#   RLSWEEP_SLURM_WIPE=1   make `down` delete the state folder (same as --wipe). Job ids then
#                          restart at 1: never reuse a submitit folder across a wipe.
#
# Daemons (stopped again by `down`, through their pidfiles): munged (user munge), mariadbd (user
# mysql), slurmdbd, slurmctld, slurmd. Configs come from slurm/slurm.conf.in and
# slurm/slurmdbd.conf.in with @PLACEHOLDERS@ substituted.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STATE_DIR=${RLSWEEP_SLURM_DIR:-/tmp/rlsweep-slurm}
STATE_DIR=${STATE_DIR%/}
DB_PORT=${RLSWEEP_SLURM_DB_PORT:-3307}
CTLD_PORT=${RLSWEEP_SLURM_PORT:-6817}
SLURMD_PORT=$((CTLD_PORT + 1))
DBD_PORT=$((CTLD_PORT + 2))
TIMEOUT=${RLSWEEP_SLURM_TIMEOUT:-60}
CLUSTER_NAME=rlsweep
DB_USER=slurm
PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)

ETC_DIR=$STATE_DIR/etc
RUN_DIR=$STATE_DIR/run
LOG_DIR=$STATE_DIR/log
SLURM_CONF_FILE=$ETC_DIR/slurm.conf
DBD_CONF_FILE=$ETC_DIR/slurmdbd.conf
DB_PASS_FILE=$ETC_DIR/db.pass
MUNGE_DIR=$STATE_DIR/munge
MUNGE_SOCKET=$MUNGE_DIR/munge.socket
MUNGE_KEY=$MUNGE_DIR/munge.key
MYSQL_DIR=$STATE_DIR/mysql
MYSQL_DATA=$MYSQL_DIR/data
MYSQL_SOCKET=$MYSQL_DIR/mysqld.sock
MARKER=$STATE_DIR/.rlsweep-slurm-state

# Daemons in start order: name, pidfile, log file (the pidfile paths match the templates).
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)
declare -A PIDFILE=(
  [munged]=$MUNGE_DIR/munged.pid
  [mariadbd]=$MYSQL_DIR/mariadbd.pid
  [slurmdbd]=$RUN_DIR/slurmdbd.pid
  [slurmctld]=$RUN_DIR/slurmctld.pid
  [slurmd]=$RUN_DIR/slurmd.pid
)
declare -A LOGFILE=(
  [munged]=$MUNGE_DIR/munged.log
  [mariadbd]=$MYSQL_DIR/mariadbd.log
  [slurmdbd]=$LOG_DIR/slurmdbd.log
  [slurmctld]=$LOG_DIR/slurmctld.log
  [slurmd]=$LOG_DIR/slurmd.log
)

T0_US=${EPOCHREALTIME/./}
LAUNCH_PID=""  # pid of a daemon launched in the background, watched by wait_for

elapsed() {  # seconds since the script started, one decimal
  local ds=$(((${EPOCHREALTIME/./} - T0_US) / 100000))
  printf '%d.%d' $((ds / 10)) $((ds % 10))
}
log() { printf '[local_cluster %5ss] %s\n' "$(elapsed)" "$*" >&2; }
die() { printf '[local_cluster] ERROR: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# ---------------------------------------------------------------------------------------------
# Processes

# Alive = /proc/PID exists, is not a zombie/dead entry, and runs the expected program.
# (PID 1 here reaps orphans late: a zombie still passes `kill -0`.)
pid_alive() {
  local pid=$1 comm=${2:-} stat state
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  state=${stat##*) }
  state=${state%% *}
  [[ $state == Z || $state == X || $state == x ]] && return 1
  if [[ -n $comm ]]; then
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm" ]] || return 1
  fi
  return 0
}

# Prints the daemon's pid when its pidfile names a live process running that daemon.
daemon_pid() {
  local name=$1 pid
  [[ -r ${PIDFILE[$name]} ]] || return 1
  pid=$(tr -dc '0-9' <"${PIDFILE[$name]}" 2>/dev/null) || return 1
  pid_alive "$pid" "$name" || return 1
  echo "$pid"
}

all_running() {
  local d
  for d in "${DAEMONS[@]}"; do daemon_pid "$d" >/dev/null || return 1; done
}

wait_gone() {  # pid timeout_s
  local pid=$1 deadline=$((SECONDS + $2))
  while pid_alive "$pid"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

stop_daemon() {
  local name=$1 pid
  if ! pid=$(daemon_pid "$name"); then
    rm -f "${PIDFILE[$name]}"
    return 0
  fi
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  if ! wait_gone "$pid" 30; then
    log "$name (pid $pid) ignored SIGTERM for 30 s: sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    wait_gone "$pid" 10 || die "$name (pid $pid) did not exit after SIGKILL"
  fi
  rm -f "${PIDFILE[$name]}"
}

kill_tree() {  # pid: SIGKILL a process and all its descendants
  local pid=$1 child
  for child in $(pgrep -P "$pid" 2>/dev/null || true); do kill_tree "$child"; done
  kill -KILL "$pid" 2>/dev/null || true
}

# slurmstepd processes forked by *our* slurmd carry our SLURM_CONF in their environment.
our_stepds() {
  local p
  for p in $(pgrep -x slurmstepd 2>/dev/null || true); do
    grep -qzxF "SLURM_CONF=$SLURM_CONF_FILE" "/proc/$p/environ" 2>/dev/null && echo "$p"
  done
  return 0
}

# ---------------------------------------------------------------------------------------------
# Readiness

fail_step() {  # step logfile [reason]
  local step=$1 logfile=$2 reason=${3:-"not ready after $TIMEOUT s"}
  {
    printf '[local_cluster] ERROR: step "%s" failed: %s\n' "$step" "$reason"
    if [[ -n $logfile && -r $logfile ]]; then
      printf '[local_cluster] --- last 25 lines of %s ---\n' "$logfile"
      tail -n 25 "$logfile"
    fi
    printf '[local_cluster] logs: %s; stop what did start: RLSWEEP_SLURM_DIR=%q %s down\n' \
      "$LOG_DIR" "$STATE_DIR" "$0"
  } >&2
  exit 1
}

# wait_for STEP DAEMON CMD...: retry CMD until it succeeds; fail at the timeout or as soon as
# the daemon (if given) has died.
wait_for() {
  local step=$1 daemon=$2 deadline=$((SECONDS + TIMEOUT)) logfile=""
  shift 2
  [[ -n $daemon ]] && logfile=${LOGFILE[$daemon]}
  until "$@" >/dev/null 2>&1; do
    if [[ -n $daemon && -s ${PIDFILE[$daemon]} ]] && ! daemon_pid "$daemon" >/dev/null; then
      fail_step "$step" "$logfile" "$daemon exited"
    fi
    if [[ -n $LAUNCH_PID ]] && ! pid_alive "$LAUNCH_PID"; then
      fail_step "$step" "$logfile" "$daemon exited"
    fi
    ((SECONDS < deadline)) || fail_step "$step" "$logfile"
    sleep 0.2
  done
  LAUNCH_PID=""
  log "ready: $step"
}

munge_ok() { munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET"; }
db_ping() { mariadb-admin --no-defaults --socket="$MYSQL_SOCKET" -u root ping; }
dbd_ok() { sacctmgr -n list cluster; }
ctld_ok() { scontrol ping | grep -q 'is UP'; }
node_state() { sinfo -h -N -o '%T' 2>/dev/null | head -n 1; }
node_ok() { [[ $(node_state) =~ ^(idle|mixed|allocated)$ ]]; }

# ---------------------------------------------------------------------------------------------
# Setup

need_root() {
  [[ $EUID -eq 0 ]] || die "'$1' must run as root (the daemons run as root, munge and mysql)"
}

ensure_packages() {
  local p missing=() st
  for p in "${PACKAGES[@]}"; do
    st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ $st == "install ok installed" ]] || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  [[ $EUID -eq 0 ]] || die "missing Debian packages: ${missing[*]} (run as root to install them)"
  log "installing Debian packages: ${missing[*]}"
  # Keep the packages' init scripts from starting system-wide daemons (no systemd here).
  local policy=/usr/sbin/policy-rc.d tmp_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && tmp_policy=1
  fi
  local apt=(apt-get -o DPkg::Lock::Timeout=300 -y -q --no-install-recommends)
  local rc=0
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install "${missing[@]}" >&2 || {
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -q update >&2 &&
      DEBIAN_FRONTEND=noninteractive "${apt[@]}" install "${missing[@]}" >&2
  } || rc=$?
  ((tmp_policy)) && rm -f "$policy"
  ((rc == 0)) || die "apt-get install ${missing[*]} failed (rc=$rc)"
  log "packages installed"
}

make_dirs() {
  install -d -m 0755 "$STATE_DIR" "$ETC_DIR" "$RUN_DIR" "$LOG_DIR" \
    "$STATE_DIR/slurmctld" "$STATE_DIR/slurmd"
  install -d -m 0755 -o munge -g munge "$MUNGE_DIR"
  install -d -m 0755 -o mysql -g mysql "$MYSQL_DIR"  # the datadir inside stays private
  touch "$MARKER"
  runuser -u munge -- test -w "$MUNGE_DIR" ||
    die "user munge cannot reach $MUNGE_DIR: put RLSWEEP_SLURM_DIR somewhere all users can traverse (not under /root)"
  runuser -u mysql -- test -w "$MYSQL_DIR" ||
    die "user mysql cannot reach $MYSQL_DIR: put RLSWEEP_SLURM_DIR somewhere all users can traverse (not under /root)"
}

sed_escape() { printf '%s' "$1" | sed -e 's/[\\|&]/\\&/g'; }

# render TEMPLATE OUTPUT MODE KEY=VALUE...: substitute @KEY@; replace OUTPUT only if it changed.
render() {
  local tmpl=$1 out=$2 mode=$3 kv args=()
  shift 3
  for kv in "$@"; do
    args+=(-e "s|@${kv%%=*}@|$(sed_escape "${kv#*=}")|g")
  done
  local tmp
  tmp=$(mktemp "$out.XXXXXX")
  chmod "$mode" "$tmp"
  sed "${args[@]}" "$tmpl" >"$tmp"
  if grep -qE '@[A-Z_]+@' "$tmp"; then
    rm -f "$tmp"
    die "unsubstituted placeholder left in $tmpl: $(grep -oE '@[A-Z_]+@' "$tmpl" | sort -u | tr '\n' ' ')"
  fi
  if cmp -s "$tmp" "$out"; then rm -f "$tmp"; else mv -f "$tmp" "$out"; fi
}

render_configs() {
  local node_line node_name db_pass
  node_line=$(slurmd -C 2>/dev/null | grep -m1 '^NodeName=') ||
    die "'slurmd -C' printed no NodeName line"
  node_name=${node_line%% *}
  node_name=${node_name#NodeName=}
  if [[ ! -s $DB_PASS_FILE ]]; then
    (umask 077 && head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$DB_PASS_FILE")
  fi
  db_pass=$(<"$DB_PASS_FILE")
  local common=(STATE_DIR="$STATE_DIR" MUNGE_SOCKET="$MUNGE_SOCKET" DBD_PORT="$DBD_PORT")
  render "$SCRIPT_DIR/slurm.conf.in" "$SLURM_CONF_FILE" 644 "${common[@]}" \
    CLUSTER_NAME="$CLUSTER_NAME" CTLD_HOST="$(hostname -s)" CTLD_PORT="$CTLD_PORT" \
    SLURMD_PORT="$SLURMD_PORT" NODE_LINE="$node_line" NODE_NAME="$node_name"
  render "$SCRIPT_DIR/slurmdbd.conf.in" "$DBD_CONF_FILE" 600 "${common[@]}" \
    DB_PORT="$DB_PORT" DB_USER="$DB_USER" DB_PASS="$db_pass"
  chmod 600 "$DBD_CONF_FILE"
}

# ---------------------------------------------------------------------------------------------
# Daemons

start_munged() {
  if ! daemon_pid munged >/dev/null; then
    if [[ ! -s $MUNGE_KEY ]]; then
      (umask 077 && dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none)
    fi
    chown munge:munge "$MUNGE_KEY"
    chmod 0400 "$MUNGE_KEY"
    rm -f "${PIDFILE[munged]}" "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged --key-file="$MUNGE_KEY" --socket="$MUNGE_SOCKET" \
      --pid-file="${PIDFILE[munged]}" --log-file="${LOGFILE[munged]}" \
      --seed-file="$MUNGE_DIR/munged.seed" </dev/null >>"$LOG_DIR/munged.stderr" 2>&1 9>&- ||
      fail_step "munged start" "$LOG_DIR/munged.stderr" "munged exited with an error"
  fi
  wait_for "munge -n | unmunge" munged munge_ok
}

start_mariadbd() {
  if ! daemon_pid mariadbd >/dev/null; then
    if [[ ! -d $MYSQL_DATA/mysql ]]; then
      log "initialising the MariaDB datadir $MYSQL_DATA"
      rm -rf "$MYSQL_DATA"
      mariadb-install-db --no-defaults --user=mysql --datadir="$MYSQL_DATA" \
        --auth-root-authentication-method=socket --skip-test-db \
        </dev/null >>"$LOG_DIR/mariadb-install-db.log" 2>&1 ||
        fail_step "mariadb-install-db" "$LOG_DIR/mariadb-install-db.log" "it exited with an error"
    fi
    rm -f "${PIDFILE[mariadbd]}" "$MYSQL_SOCKET"
    log "starting mariadbd on 127.0.0.1:$DB_PORT"
    UMASK=0644 setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$MYSQL_DATA" \
      --socket="$MYSQL_SOCKET" --pid-file="${PIDFILE[mariadbd]}" \
      --bind-address=127.0.0.1 --port="$DB_PORT" --skip-name-resolve \
      --log-error="${LOGFILE[mariadbd]}" --innodb-buffer-pool-size=128M \
      --innodb-lock-wait-timeout=900 </dev/null >>"$LOG_DIR/mariadbd.stderr" 2>&1 9>&- &
    LAUNCH_PID=$!  # mariadbd does not fork: watch it until it answers
  fi
  wait_for "database ping" mariadbd db_ping
  local pass
  pass=$(<"$DB_PASS_FILE")
  mariadb --no-defaults --socket="$MYSQL_SOCKET" -u root >>"$LOG_DIR/db-setup.log" 2>&1 <<SQL ||
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$pass';
ALTER USER '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL ON slurm_acct_db.* TO '$DB_USER'@'127.0.0.1';
SQL
    fail_step "database user setup" "$LOG_DIR/db-setup.log" "SQL failed"
}

start_slurmdbd() {
  if ! daemon_pid slurmdbd >/dev/null; then
    rm -f "${PIDFILE[slurmdbd]}"
    log "starting slurmdbd"
    slurmdbd </dev/null >>"$LOG_DIR/slurmdbd.stderr" 2>&1 9>&- ||
      fail_step "slurmdbd start" "${LOGFILE[slurmdbd]}" "slurmdbd exited with an error"
  fi
  wait_for "sacctmgr -n list cluster" slurmdbd dbd_ok
  if ! sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER_NAME"; then
    log "registering cluster $CLUSTER_NAME in the accounting database"
    sacctmgr -i add cluster "$CLUSTER_NAME" >&2
  fi
}

start_slurmctld() {
  if ! daemon_pid slurmctld >/dev/null; then
    rm -f "${PIDFILE[slurmctld]}"
    log "starting slurmctld"
    slurmctld </dev/null >>"$LOG_DIR/slurmctld.stderr" 2>&1 9>&- ||
      fail_step "slurmctld start" "${LOGFILE[slurmctld]}" "slurmctld exited with an error"
  fi
  wait_for "scontrol ping" slurmctld ctld_ok
}

start_slurmd() {
  if ! daemon_pid slurmd >/dev/null; then
    rm -f "${PIDFILE[slurmd]}"
    log "starting slurmd"
    slurmd </dev/null >>"$LOG_DIR/slurmd.stderr" 2>&1 9>&- ||
      fail_step "slurmd start" "${LOGFILE[slurmd]}" "slurmd exited with an error"
  fi
  wait_for "node idle in sinfo" slurmd node_ok
}

print_exports() {
  printf 'export SLURM_CONF=%q\n' "$SLURM_CONF_FILE"
}

# Serialises concurrent up/down calls. Daemons are started with `9>&-` so they do not inherit
# (and hold forever) the lock.
take_lock() {
  exec 9>"$STATE_DIR/.lock"
  flock -w 120 9 || die "another local_cluster.sh holds $STATE_DIR/.lock"
}

# ---------------------------------------------------------------------------------------------
# Commands

cmd_up() {
  export SLURM_CONF=$SLURM_CONF_FILE
  if all_running; then
    log "already up"
    print_exports
    return 0
  fi
  need_root up
  ensure_packages
  install -d -m 0755 "$STATE_DIR"
  take_lock
  if ! all_running; then
    make_dirs
    render_configs
    start_munged
    start_mariadbd
    start_slurmdbd
    start_slurmctld
    start_slurmd
    log "cluster up (state in $STATE_DIR)"
  fi
  print_exports
}

cmd_down() {
  local wipe=${RLSWEEP_SLURM_WIPE:-0} arg
  for arg in "$@"; do
    case $arg in
      --wipe) wipe=1 ;;
      *) usage ;;
    esac
  done
  export SLURM_CONF=$SLURM_CONF_FILE
  if [[ ! -d $STATE_DIR ]]; then
    log "nothing to stop ($STATE_DIR does not exist)"
    return 0
  fi
  local d any=0
  for d in "${DAEMONS[@]}"; do daemon_pid "$d" >/dev/null && any=1; done
  if ((any)); then
    need_root down
    take_lock
    if daemon_pid slurmctld >/dev/null && [[ -n $(squeue -h -o %A 2>/dev/null) ]]; then
      log "cancelling the jobs still queued or running"
      scancel --partition=debug 2>/dev/null || true
      local deadline=$((SECONDS + 30))
      while [[ -n $(squeue -h -o %A 2>/dev/null) ]] && ((SECONDS < deadline)); do sleep 0.2; done
    fi
    stop_daemon slurmd
    local p
    for p in $(our_stepds); do
      log "killing leftover slurmstepd $p and its children"
      kill_tree "$p"
    done
    for d in slurmctld slurmdbd mariadbd munged; do stop_daemon "$d"; done
    log "stopped"
  else
    log "nothing running"
  fi
  if [[ $wipe == 1 ]]; then
    [[ -e $MARKER ]] || die "refusing to wipe $STATE_DIR: it lacks the marker $MARKER"
    need_root "down --wipe"
    rm -rf -- "$STATE_DIR"
    log "wiped $STATE_DIR (Slurm job ids restart at 1)"
  fi
}

cmd_status() {
  export SLURM_CONF=$SLURM_CONF_FILE
  local d pid ok=0
  echo "state dir: $STATE_DIR"
  for d in "${DAEMONS[@]}"; do
    if pid=$(daemon_pid "$d"); then
      printf '  %-10s running (pid %s)\n' "$d" "$pid"
    else
      printf '  %-10s not running\n' "$d"
      ok=1
    fi
  done
  if daemon_pid slurmctld >/dev/null; then
    if timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; then
      echo "  slurmctld  answers ping"
      echo "  node       $(timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null | head -n 1)"
    else
      echo "  slurmctld  does not answer 'scontrol ping'"
      ok=1
    fi
  fi
  if ((ok == 0)); then
    echo "up: export SLURM_CONF=$SLURM_CONF_FILE"
  else
    echo "not (fully) up"
  fi
  return $ok
}

main() {
  (($# >= 1)) || usage
  local cmd=$1
  shift
  case $cmd in
    up) (($# == 0)) || usage; cmd_up ;;
    down) cmd_down "$@" ;;
    status) (($# == 0)) || usage; cmd_status ;;
    -h | --help | help) usage ;;
    *) usage ;;
  esac
}

main "$@"
