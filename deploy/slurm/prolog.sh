#!/bin/sh
# CommInsight's Slurm Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/comminsight-prolog.sh;
# docs/deploy-slurm.md). slurmd runs it as root on each node of a job before the job's first
# step there, with SLURM_JOB_ID, SLURM_JOB_UID and SLURM_JOB_USER in its environment.
#
# It makes sure the node Agent runs and that the job's user has a directory of their own in
# the shared home, <home>/users/<uid>/ (0700, theirs), made here rather than by their first
# Profiler so that it exists before any rank starts.
#
# A Prolog that exits non-zero drains the node and requeues the job held: nothing CommInsight
# lacks is worth that. Every problem is logged (syslog, daemon facility, tag comminsight-prolog,
# and stderr) and the script exits 0, whatever happened; the job then runs unprofiled or with
# a directory its Profiler makes itself.
#
# Settings (environment, or edit the defaults here; slurmd passes no environment of its own):
#   COMMINSIGHT_PREFIX      the install prefix (default /opt/comminsight)
#   COMMINSIGHT_HOME        the node Agent's home (default the prefix, as in its systemd unit)
#   COMMINSIGHT_SLURM_UNIT  the Agent's systemd unit (default comminsight-agent)
#   COMMINSIGHT_SLURM_TIMEOUT_S  longest wait for each systemctl call (default 20)
set -eu

# slurmd sets no search path
: "${PATH:=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"
export PATH
umask 022

TAG=comminsight-prolog
PREFIX=${COMMINSIGHT_PREFIX:-/opt/comminsight}
HOME_DIR=${COMMINSIGHT_HOME:-$PREFIX}
UNIT=${COMMINSIGHT_SLURM_UNIT:-comminsight-agent}
WAIT_S=${COMMINSIGHT_SLURM_TIMEOUT_S:-20}
JOB=${SLURM_JOB_ID:-?}

say() {
    printf '%s: job %s: %s\n' "$TAG" "$JOB" "$*" >&2
    logger -t "$TAG" -p daemon.warning -- "job $JOB: $*" 2>/dev/null || :
}

# Whatever stops the script early (a bug here, an unset variable) is logged, never returned.
# shellcheck disable=SC2329  # called by the trap below, which shellcheck does not follow
on_exit() {
    status=$?
    [ "$status" -eq 0 ] || say "stopped early (status $status)"
    exit 0
}
trap on_exit EXIT

# a command, given at most WAIT_S seconds (then TERM, 5 s later KILL)
bounded() {
    if command -v timeout >/dev/null 2>&1; then
        timeout -k 5 "$WAIT_S" "$@"
    else
        "$@"
    fi
}

# OWNER and MODE (octal, e.g. 1733) of a path itself, a link not followed; empty if unknown
stat_path() {
    OWNER=$(stat -c '%u' -- "$1" 2>/dev/null) || OWNER=
    MODE=$(stat -c '%a' -- "$1" 2>/dev/null) || MODE=
}

# whether octal MODE has any of the octal BITS
has_bits() {
    [ -n "$1" ] && [ $((0$1 & 0$2)) -ne 0 ]
}

ensure_agent() {
    if ! command -v systemctl >/dev/null 2>&1; then
        say "no systemctl here: the node Agent ($UNIT) is not checked"
        return 0
    fi
    if bounded systemctl is-active --quiet "$UNIT"; then
        return 0
    fi
    if bounded systemctl start "$UNIT"; then
        say "started $UNIT, which was not running"
    else
        say "could not start $UNIT (status $?): the job runs unprofiled on this node"
    fi
}

# users/ as the Agent makes it: root's, not a link, and others may not remove or replace what
# is in it (sticky, or not writable by them). Made here, 1733, when the Agent has not yet.
ensure_users_dir() {
    users=$1
    if [ -L "$users" ]; then
        say "refused: $users is a symbolic link"
        return 1
    fi
    if [ ! -e "$users" ]; then
        if ! mkdir -m 1733 -- "$users"; then
            say "could not make $users"
            return 1
        fi
    fi
    stat_path "$users"
    if [ ! -d "$users" ] || [ "$OWNER" != 0 ]; then
        say "refused: $users is not a directory of root's (owner ${OWNER:-unknown})"
        return 1
    fi
    if has_bits "$MODE" 022 && ! has_bits "$MODE" 1000; then
        say "refused: $users (mode $MODE) lets other users replace its entries (not sticky)"
        return 1
    fi
    return 0
}

ensure_user_dir() {
    uid=$1
    gid=$2
    case $uid in
        '' | *[!0-9]*)
            say "SLURM_JOB_UID '$uid' is not a uid: no user directory made"
            return 0
            ;;
    esac
    if [ -L "$HOME_DIR" ] || [ ! -d "$HOME_DIR" ]; then
        say "no home $HOME_DIR (not a directory, or a link): no user directory made"
        return 0
    fi
    stat_path "$HOME_DIR"
    if [ "$OWNER" != 0 ] || [ -z "$MODE" ] || has_bits "$MODE" 022; then
        say "refused: $HOME_DIR is not a shared home (owner ${OWNER:-unknown}, mode ${MODE:-unknown}; it must be root's and writable by root alone)"
        return 0
    fi
    ensure_users_dir "$HOME_DIR/users" || return 0

    dir=$HOME_DIR/users/$uid
    if [ -L "$dir" ]; then
        say "refused: $dir is a symbolic link (to $(readlink -- "$dir" 2>/dev/null || echo '?')); not followed, left as it is"
        return 0
    fi
    if [ -e "$dir" ]; then
        stat_path "$dir"
        if [ ! -d "$dir" ] || [ "$OWNER" != "$uid" ]; then
            say "refused: $dir exists, owned by uid ${OWNER:-unknown}, not the job's user ($uid); left as it is"
        fi
        return 0
    fi
    # mkdir makes the directory or fails if anything is there (a link planted since the test
    # above included: mkdir never follows one), and the new directory is root's until chown,
    # so no other user can replace it in between (users/ is sticky). install -d would follow a
    # link and chown an existing directory.
    if ! mkdir -m 0700 -- "$dir"; then
        say "could not make $dir"
        return 0
    fi
    case $gid in
        '' | *[!0-9]*) owner=$uid ;;
        *) owner=$uid:$gid ;;
    esac
    if ! chown -h -- "$owner" "$dir"; then
        say "could not give $dir to $owner; removing it"
        rmdir -- "$dir" 2>/dev/null || say "could not remove $dir"
    fi
    return 0
}

ensure_agent
ensure_user_dir "${SLURM_JOB_UID:-}" "${SLURM_JOB_GID:-}"
exit 0
