cd "$(dirname "$0")/../../.." || exit 1  # the project root
for busy in 0 1; do
 for set in "OMP_WAIT_POLICY=PASSIVE" "GOMP_SPINCOUNT=1000" "GOMP_SPINCOUNT=10000" "GOMP_SPINCOUNT=100000" "OMP_WAIT_POLICY=ACTIVE"; do
  if [ $busy = 1 ]; then python3 -c "while True: pass" & BP=$!; fi
  env $set BUSY=$busy timeout 300 .venv/bin/python bench/results/2026-11-27-s25/spin.py 2>&1 | grep -E "^(PASSIVE|None|ACTIVE)"
  if [ $busy = 1 ]; then kill $BP; fi
 done
done
