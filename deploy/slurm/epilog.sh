#!/bin/sh
# CommInsight's Slurm Epilog (slurm.conf: Epilog=/etc/slurm/epilog.d/comminsight-epilog.sh;
# docs/deploy-slurm.md). slurmd runs it as root on every node of a job when the job ends, with
# SLURM_JOB_ID, SLURM_JOB_UID and SLURM_JOB_USER in its environment.
#
# It asks the node Agent to archive now everything sealed (`comminsight archive flush`), so
# that the job's logs and summaries reach the archive without waiting for the Agent's next
# pass. The flush needs the Agent's token: taken from the environment, else from the Agent's
# EnvironmentFile (root's, 0600: where the token belongs, since the node config is readable by
# every user), else the CLI reads COMMINSIGHT_AGENT_TOKEN from <home>/etc/comminsight.conf
# itself. The token goes to the CLI in its environment, never on its command line (which
# every user of the node can read in /proc).
#
# An Epilog that exits non-zero drains the node: a CommInsight problem is logged (syslog,
# daemon facility, tag comminsight-epilog, and stderr) and the script exits 0 whatever
# happened. The Agent archives the job's files on its next pass anyway.
#
# Settings (environment, or edit the defaults here; slurmd passes no environment of its own):
#   COMMINSIGHT_PREFIX      the install prefix (default /opt/comminsight)
#   COMMINSIGHT_HOME        the node Agent's home (default the prefix, as in its systemd unit)
#   COMMINSIGHT_SLURM_ENV_FILE  the Agent's EnvironmentFile (default <prefix>/etc/comminsight-agent.env)
#   COMMINSIGHT_SLURM_TIMEOUT_S  longest wait for the flush (default 30)
set -eu

# slurmd sets no search path
: "${PATH:=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"
export PATH

TAG=comminsight-epilog
PREFIX=${COMMINSIGHT_PREFIX:-/opt/comminsight}
HOME_DIR=${COMMINSIGHT_HOME:-$PREFIX}
ENV_FILE=${COMMINSIGHT_SLURM_ENV_FILE:-$PREFIX/etc/comminsight-agent.env}
WAIT_S=${COMMINSIGHT_SLURM_TIMEOUT_S:-30}
JOB=${SLURM_JOB_ID:-?}
CLI=$PREFIX/bin/comminsight

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

# The token from the Agent's EnvironmentFile, if that file is root's and no one else's to read
# (a file others could write could hand the CLI a token of their choosing to send).
token_from_env_file() {
    [ -f "$ENV_FILE" ] && [ ! -L "$ENV_FILE" ] || return 0
    owner=$(stat -c '%u' -- "$ENV_FILE" 2>/dev/null) || owner=
    mode=$(stat -c '%a' -- "$ENV_FILE" 2>/dev/null) || mode=
    if [ "$owner" != 0 ] || [ -z "$mode" ] || [ $((0$mode & 077)) -ne 0 ]; then
        say "ignored $ENV_FILE: not root's alone (owner ${owner:-unknown}, mode ${mode:-unknown})"
        return 0
    fi
    # the last assignment wins, as in systemd; one pair of surrounding quotes is removed
    value=$(sed -n 's/^[[:space:]]*COMMINSIGHT_AGENT_TOKEN=//p' -- "$ENV_FILE" | tail -n 1)
    case $value in
        \"*\")
            value=${value#\"}
            value=${value%\"}
            ;;
        \'*\')
            value=${value#\'}
            value=${value%\'}
            ;;
    esac
    if [ -n "$value" ]; then
        COMMINSIGHT_AGENT_TOKEN=$value
        export COMMINSIGHT_AGENT_TOKEN
    fi
}

if [ ! -x "$CLI" ]; then
    say "no $CLI: nothing flushed"
    exit 0
fi
if [ -z "${COMMINSIGHT_AGENT_TOKEN:-}" ]; then
    token_from_env_file
fi
COMMINSIGHT_HOME=$HOME_DIR
export COMMINSIGHT_HOME
if out=$(bounded "$CLI" archive flush 2>&1); then
    exit 0
else
    status=$?
fi
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    say "comminsight archive flush gave no answer in ${WAIT_S} s; the Agent archives on its next pass"
else
    say "comminsight archive flush failed (status $status): $(printf '%s\n' "$out" | tail -n 3 | tr '\n' ' ')"
fi
exit 0
