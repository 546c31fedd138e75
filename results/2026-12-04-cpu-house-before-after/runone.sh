#!/bin/bash
# usage: runone.sh <before|after> <label> <bench args...>
tree=$1; label=$2; shift 2
d=/tmp/bench-compare/runs; mkdir -p $d
f=$d/$label.$tree
cd /tmp/bench-$tree
{
echo "tree=$tree sha=$(git rev-parse --short HEAD)"
echo "cmd=cd /tmp/bench-$tree && .venv/bin/python $*"
echo "start=$(date -u +%FT%TZ) load_start=$(uptime)"
} > $f.meta
s=$(date +%s.%N)
.venv/bin/python "$@" > $f.out 2> $f.err
rc=$?
e=$(date +%s.%N)
{
echo "end=$(date -u +%FT%TZ) load_end=$(uptime)"
echo "rc=$rc wall_s=$(echo "$e - $s" | bc)"
} >> $f.meta
cat $f.meta $f.out; tail -3 $f.err
