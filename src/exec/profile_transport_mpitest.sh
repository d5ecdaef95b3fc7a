#!/usr/bin/env bash
# CTest (label mpi): `fcp profile --target cpu` under mpirun with 2 ranks.
# Checks exit 0, that the report names the MPI transport, and that only rank 0
# printed (one report). Usage: profile_transport_mpitest.sh MPIEXEC FCP
set -u
mpiexec=$1
fcp=$2
out=$("$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$fcp" profile --target cpu \
      --lengths 512,1024 --degrees 1,2 --repeats 1 --min-chunk 256 --heldout 0 \
      --format json)
rc=$?
echo "$out"
if [ $rc -ne 0 ]; then echo "FAIL: exit $rc"; exit 1; fi
if ! grep -q '"transport": "mpi, 2 ranks"' <<<"$out"; then
  echo "FAIL: the report does not name the MPI transport"; exit 1
fi
n=$(grep -c '"coefficients"' <<<"$out")
if [ "$n" -ne 1 ]; then echo "FAIL: $n reports printed (only rank 0 prints)"; exit 1; fi
echo PASS
