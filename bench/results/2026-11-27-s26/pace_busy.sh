cd "$(dirname "$0")/../../.." || exit 1  # the project root
for busy in 0 1; do
 for set in "X=default" "X=default NOPACE=1" "GOMP_SPINCOUNT=0"; do
  if [ $busy = 1 ]; then python3 -c "while True: pass" & BP=$!; fi
  env $set BUSY=$busy timeout 300 .venv/bin/python bench/results/2026-11-27-s26/pace_busy.py 2>&1 | grep -E " ms "
  if [ $busy = 1 ]; then kill $BP; fi
 done
done
