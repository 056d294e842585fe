#!/usr/bin/env bash
# Why this file exists: checks that one failing rank ends the whole job (Note [Failure],
# dist/communicator.h): dist_abort_program's rank 1 throws while rank 0 waits in an
# all_reduce, then ends through abort_job or returns 1 from main; either way the job must
# end within seconds, non-zero, with "rank 1: <its message>" once.
#   bash dist_abort_test.sh <mpirun> <dist_abort_program>
set -u
mpirun="${1:?usage: dist_abort_test.sh <mpirun> <program>}"
program="${2:?usage: dist_abort_test.sh <mpirun> <program>}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "dist_abort_test: $*"; exit 1; }
# abort_job: the failing rank ends the job itself. return: it returns 1 from main, and the
# exit handler ends the job (Note [MPI lifetime], dist/mpi_runtime.cpp).
for mode in abort_job return; do
  start=$(date +%s)
  timeout 60 "$mpirun" -np 2 --oversubscribe --allow-run-as-root "$program" "$mode" >"$out" 2>&1
  rc=$?
  elapsed=$(($(date +%s) - start))
  cat "$out"
  [ $rc -ne 124 ] || fail "$mode: the job was still running after 60 s: a failing rank hung the others"
  [ $rc -ne 0 ] || fail "$mode: the job exited 0 although rank 1 failed"
  [ "$elapsed" -le 30 ] || fail "$mode: the job took ${elapsed} s to end (want seconds)"
  count=$(grep -c "^rank 1: simulated failure in step 2" "$out")
  [ "$count" -eq 1 ] || fail "$mode: want 'rank 1: simulated failure in step 2' once, got it $count times"
  if grep -q "finished, which it must not" "$out"; then fail "$mode: a rank finished after rank 1 failed"; fi
  echo "dist_abort_test: $mode ok (exit $rc after ${elapsed} s)"
done
