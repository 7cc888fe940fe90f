#!/usr/bin/env bash
# Check accelstub's MAX78000 emulator against the vendor tool (nothing generated is committed).
#
# Prerequisites (outside the repository):
#   - an ai8x-synthesis work tree at $SYN (default /tmp/ai8x), e.g. a clone of
#     analogdevicesinc/ai8x-synthesis;
#   - a venv at $PY's location with its requirements and torch 2.13.0 and numpy<2
#     (python3 -m venv /tmp/ai8x-venv; pip install torch==2.13.0 'numpy<2' + the repo's deps);
#   - accelstub installed (pip install -e .).
# Usage: benchmarks/ai8x_vendor_check.sh [TEST_NAME ...]   (default: every tests/test-*.yaml)
# Prints "name result detail": PASS/FAIL/ERROR from `accelstub run`, GEN-FAIL when ai8xize.py
# itself refuses the configuration for MAX78000. The real networks need their checkpoints, e.g.
#   "mnist|--checkpoint-file trained/ai85-mnist-qat8-q.pth.tar --config-file networks/mnist-chw-ai85.yaml --softmax"
set -u
SYN=${SYN:-/tmp/ai8x}; OUT=${OUT:-/tmp/ai8x-out}; PY=${PY:-/tmp/ai8x-venv/bin/python}
export SYN OUT PY TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1   # old checkpoints pickle optimizers
mkdir -p "$OUT"
one() {
  entry=$1
  case "$entry" in
    *"|"*) prefix=${entry%%|*}; args=${entry#*|} ;;
    *) prefix=$entry; args="--config-file tests/test-$entry.yaml" ;;
  esac
  cd "$SYN" || exit 2
  if ! "$PY" ai8xize.py --prefix "$prefix" $args --mexpress --test-dir "$OUT" --device MAX78000 \
      --compact-data --overwrite --no-version-check --timer 0 > "$OUT/$prefix.gen.log" 2>&1; then
    printf "%-34s %-9s %s\n" "$prefix" GEN-FAIL "$(grep -m1 -i error "$OUT/$prefix.gen.log" | cut -c1-120)"
    return
  fi
  res=$(cd / && timeout 600 accelstub run max78000 --program "$OUT/$prefix" 2>&1); rc=$?
  case $rc in 0) r=PASS ;; 1) r=FAIL ;; *) r=ERROR ;; esac
  printf "%-34s %-9s %s\n" "$prefix" "$r" "$(echo "$res" | tail -1 | cut -c1-200)"
}
export -f one
if [ $# -eq 0 ]; then
  set -- $(ls "$SYN"/tests/test-*.yaml | sed 's|.*/test-||; s|\.yaml$||')
fi
printf "%s\n" "$@" | xargs -P "$(nproc)" -I{} bash -c 'one "$@"' _ {}
