#!/usr/bin/env bash
# Check accelstub's MAX78000 emulator against the vendor tool (nothing generated is committed).
#
# Prerequisites (outside the repository):
#   - an ai8x-synthesis work tree at $SYN (default /tmp/ai8x), e.g. a clone of
#     analogdevicesinc/ai8x-synthesis;
#   - a venv at $PY's location with its requirements and torch 2.13.0 and numpy<2
#     (python3 -m venv /tmp/ai8x-venv; pip install torch==2.13.0 'numpy<2' + the repo's deps);
#   - accelstub installed (pip install -e .), or $ACCELSTUB naming another command.
# Usage: benchmarks/ai8x_vendor_check.sh [--vendor | --vendor-all | NAME ... | "prefix|args" ...]
#   (no argument: every tests/test-*.yaml).  A NAME listed in VENDOR below is generated with the
#   arguments the vendor's own RTL-simulation scripts pass for it; other names with only
#   --config-file tests/test-NAME.yaml.  --vendor runs the VENDOR entries, --vendor-all also
#   their variants (NAME~vN: the other invocations of the same YAML file in those scripts).
# Prints "name result detail": PASS/FAIL/ERROR from `accelstub run`, GEN-FAIL when ai8xize.py
# itself refuses the configuration for MAX78000, NO-CKPT when the checkpoint the vendor names is
# not in the work tree. The real networks need their checkpoints, e.g.
#   "mnist|--checkpoint-file trained/ai85-mnist-qat8-q.pth.tar --config-file networks/mnist-chw-ai85.yaml --softmax"
# Environment: PAR (parallel generations, default nproc), NICE (default 10), OUT, SYN, PY,
# ACCELSTUB (default "accelstub").
set -u
SYN=${SYN:-/tmp/ai8x}; OUT=${OUT:-/tmp/ai8x-out}; PY=${PY:-/tmp/ai8x-venv/bin/python}
ACCELSTUB=${ACCELSTUB:-accelstub}; PAR=${PAR:-$(nproc)}; NICE=${NICE:-10}
export SYN OUT PY ACCELSTUB NICE TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1  # old checkpoints pickle optimizers
mkdir -p "$OUT"

# Invocations taken from the vendor's RTL-simulation generator scripts in the ai8x-synthesis git
# history (rtldev/gen-rtlsims.sh and gen-rtlsims-ai85.sh, the newest version that runs the YAML
# file for MAX78000/ai85): configurations that need a checkpoint, --fifo, --legacy-test or other
# options. Removed: RTL-only options (--rtl*, --autogen, --log, --timeout, --queue-name,
# --input-csv*, --input-sync, --riscv-debug, --riscv-exclusive, --debug-new-streaming,
# --verify-writes, --verify-kernels, --mlator-noverify, --deepsleep, --slow-load) and the ones
# this script sets itself. "#not-in-vendor-scripts": no vendor script runs this YAML (or only
# with a checkpoint that is not in the tree); the checkpoint is the tests/ one of the same arch.
# NOCKPT: the vendor's checkpoint was removed from the repository (not in the clone's history).
VENDOR=(
  'multilayer-eltwise|--config-file tests/test-multilayer-eltwise.yaml --legacy-test'
  'ai85-80expansion-q4-32bitout|--checkpoint-file tests/test-mnist-80expansion-q4.pth.tar --config-file tests/test-ai85-80expansion-q4-32bitout.yaml --stop-after 1'
  'ai85-cifar10-hwc-16x16avgpool|--checkpoint-file tests/test-cifar10-bias-quant4.pth.tar --config-file tests/test-ai85-cifar10-hwc-16x16avgpool.yaml --stop-after 0'
  'ai85-cifar10-hwc-16x16avgpool~v1|--checkpoint-file tests/test-cifar10-bias-quant4.pth.tar --config-file tests/test-ai85-cifar10-hwc-16x16avgpool.yaml --stop-after 0 --avg-pool-rounding'
  'ai85-cifar10-hwc-1x1|--checkpoint-file tests/test-cifar10-1x1.pth.tar --config-file tests/test-ai85-cifar10-hwc-1x1.yaml'
  'ai85-cifar10-hwc-1x1~v1|--checkpoint-file tests/test-cifar10-1x1.pth.tar --config-file tests/test-ai85-cifar10-hwc-1x1.yaml --weight-start 3940'
  'ai85-cifar10-hwc-3x3s2p2avgpool|--checkpoint-file tests/test-cifar10-bias.pth.tar --config-file tests/test-ai85-cifar10-hwc-3x3s2p2avgpool.yaml --stop-after 0'
  'ai85-cifar10-hwc-quant4|--checkpoint-file tests/test-cifar10-bias-quant4.pth.tar --config-file tests/test-ai85-cifar10-hwc-quant4.yaml'
  'ai85-cifar10-hwc-quant4~v1|--checkpoint-file tests/test-cifar10-bias-quant4.pth.tar --config-file tests/test-ai85-cifar10-hwc-quant4.yaml --stop-after 0'
  'ai85-fire-cifar10|--config-file tests/test-ai85-fire-cifar10.yaml --checkpoint-file tests/test-firetestnet-cifar10.pth.tar'
  'ai85-fire-cifar10~v1|--config-file tests/test-ai85-fire-cifar10.yaml --checkpoint-file tests/test-firetestnet-cifar10.pth.tar --stop-after 4'
  'ai85-fire2-cifar10|--config-file tests/test-ai85-fire2-cifar10.yaml --checkpoint-file tests/test-firetestnet-cifar10.pth.tar'
  'ai85-fire2-cifar10~v1|--config-file tests/test-ai85-fire2-cifar10.yaml --checkpoint-file tests/test-firetestnet-cifar10.pth.tar --stop-after 4'
  'ai85-mnist80wide-q4|--checkpoint-file tests/test-mnist-80wide-q4.pth.tar --config-file tests/test-ai85-mnist80wide-q4.yaml --stop-after 0'
  'ai85-mnist80wide|--checkpoint-file tests/test-mnist-80wide.pth.tar --config-file tests/test-ai85-mnist80wide.yaml --stop-after 0'
  'ai85-mnist80wide~v1|--checkpoint-file tests/test-mnist-80wide.pth.tar --config-file tests/test-ai85-mnist80wide.yaml --stop-after 1'
  'ai85-mnistwide|--checkpoint-file tests/test-mnist-wide.pth.tar --config-file tests/test-ai85-mnistwide.yaml --stop-after 0'
  'catsdogs|--checkpoint-file tests/test-catsdogs-qat8-q.pth.tar --config-file tests/test-catsdogs.yaml'
  'cifar10-abs|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-cifar10-abs.yaml'
  'cifar10-chw-mlp|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-cifar10-chw-mlp.yaml'
  'cifar10-chw|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-cifar10-chw.yaml --stop-after 0'
  'cifar10-chw~v1|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-cifar10-chw.yaml --stop-after 1'
  'cifar10-chw~v2|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-cifar10-chw.yaml --stop-after 2'
  'cifar10-hwc-outputoffset|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-cifar10-hwc-outputoffset.yaml #not-in-vendor-scripts'
  'cifar10-hwc-shift1|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-cifar10-hwc-shift1.yaml --stop-after 2 #not-in-vendor-scripts'
  'cifar10-hwc-shift2|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-cifar10-hwc-shift2.yaml --stop-after 2 #not-in-vendor-scripts'
  'cifar10-hwc-stream|--checkpoint-file tests/test-cifar10-bias.pth.tar --config-file tests/test-cifar10-hwc-stream.yaml --fifo'
  'cifar10-hwc|--checkpoint-file tests/test-cifar10-bias.pth.tar --config-file tests/test-cifar10-hwc.yaml'
  'cifar10-hwc~v1|--checkpoint-file tests/test-cifar10-bias.pth.tar --config-file tests/test-cifar10-hwc.yaml --stop-after 0'
  'cifar10-hwc~v2|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-cifar10-hwc.yaml --stop-after 0'
  'cifar10-hwc~v3|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-cifar10-hwc.yaml'
  'cifar10-hwc~v4|--checkpoint-file tests/test-cifar10-bias.pth.tar --config-file tests/test-cifar10-hwc.yaml --stop-after 0 --mlator'
  'cifar10-hwc~v5|--checkpoint-file tests/test-cifar10-bias.pth.tar --config-file tests/test-cifar10-hwc.yaml --stop-after 1 --mlator'
  'cifar10-hwc~v6|--checkpoint-file tests/test-cifar10-bias.pth.tar --config-file tests/test-cifar10-hwc.yaml --stop-after 2 --mlator'
  'cifar100-ressimplenet|NOCKPT --checkpoint-file tests/test-cifar100-residual-qat8-q.pth.tar --config-file tests/test-cifar100-ressimplenet.yaml'
  'cifar100-simplewide2x|NOCKPT --checkpoint-file tests/test-cifar100-simplenetwide2x-qat-mixed-q.pth.tar --config-file tests/test-cifar100-simplewide2x.yaml'
  'faceid|--checkpoint-file tests/test-faceid-qat8-q.pth.tar --config-file tests/test-faceid.yaml --fifo'
  'fashionmnist-chw|--checkpoint-file tests/test-fashionmnist.pth.tar --config-file tests/test-fashionmnist-chw.yaml --stop-after 0'
  'ffsreadahead-cifar10-hwc|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-ffsreadahead-cifar10-hwc.yaml --fast-fifo-quad --riscv'
  'ffsx4-cifar10-hwc|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-ffsx4-cifar10-hwc.yaml --fast-fifo-quad --riscv'
  'ffsx4readahead-cifar10-hwc|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-ffsx4readahead-cifar10-hwc.yaml --fast-fifo-quad --riscv'
  'fifostream-cifar-hwc|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-fifostream-cifar-hwc.yaml --fifo'
  'fifostream-cifar-hwc~v1|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-fifostream-cifar-hwc.yaml --fifo --stop-after 0'
  'fifostream-cifar-hwc~v2|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-fifostream-cifar-hwc.yaml --fifo --stop-after 1'
  'fifostream-cifar-hwc~v3|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-fifostream-cifar-hwc.yaml --fifo --stop-after 2'
  'fifostream-cifar-hwc~v4|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-fifostream-cifar-hwc.yaml --fifo --stop-after 2 --fast-fifo --riscv --input-fifo'
  'fifostream-cifar-hwc~v5|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-fifostream-cifar-hwc.yaml --fifo --stop-after 2 --fast-fifo-quad --riscv --input-fifo'
  'fifostream-cifar-hwc~v6|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-fifostream-cifar-hwc.yaml --fifo --stop-after 2 --fast-fifo-quad --riscv --input-fifo --stop-after 0'
  'fifostream-cifar|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-fifostream-cifar.yaml --fifo'
  'fifostream-cifar~v1|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-fifostream-cifar.yaml --fifo --stop-after 0'
  'fifostream-cifar~v2|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-fifostream-cifar.yaml --fifo --stop-after 1'
  'fifostream-cifar~v3|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-fifostream-cifar.yaml --fifo --stop-after 2'
  'fifostream-x4-cifar-hwc-128x128|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-fifostream-x4-cifar-hwc-128x128.yaml --fifo #not-in-vendor-scripts'
  'fifostream-x4-cifar-hwc|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-fifostream-x4-cifar-hwc.yaml --fifo #not-in-vendor-scripts'
  'kws20-hwc|--checkpoint-file tests/test-kws20-qat8-q.pth.tar --config-file tests/test-kws20-hwc.yaml'
  'mnist-chw-ai85|--checkpoint-file tests/test-mnist-qat8-q.pth.tar --config-file tests/test-mnist-chw-ai85.yaml --riscv'
  'mnist-chw-extrasmallnet|--checkpoint-file tests/test-mnist-extrasmallnet.pth.tar --config-file tests/test-mnist-chw-extrasmallnet.yaml --stop-after 0'
  'mnist-chw-extrasmallnet~v1|--checkpoint-file tests/test-mnist-extrasmallnet.pth.tar --config-file tests/test-mnist-chw-extrasmallnet.yaml --stop-after 1'
  'mnist-chw-extrasmallnet~v2|--checkpoint-file tests/test-mnist-extrasmallnet.pth.tar --config-file tests/test-mnist-chw-extrasmallnet.yaml --stop-after 2'
  'mnist-chw-extrasmallnet~v3|--checkpoint-file tests/test-mnist-extrasmallnet.pth.tar --config-file tests/test-mnist-chw-extrasmallnet.yaml --stop-after 2 --one-shot'
  'mnist-chw-extrasmallnet~v4|--checkpoint-file tests/test-mnist-extrasmallnet.pth.tar --config-file tests/test-mnist-chw-extrasmallnet.yaml --stop-after 2 --stop-start'
  'mnist-chw-extrasmallnet~v5|--checkpoint-file tests/test-mnist-extrasmallnet.pth.tar --config-file tests/test-mnist-chw-extrasmallnet.yaml --stop-after 2 --link-layer'
  'mnist-chw|--checkpoint-file tests/test-mnist.pth.tar --config-file tests/test-mnist-chw.yaml'
  'mnist-chw~v1|--checkpoint-file tests/test-mnist.pth.tar --config-file tests/test-mnist-chw.yaml --one-shot --stop-after 2'
  'mpadd-minimal-no0|--checkpoint-file tests/test-mp_add_minimized_q.pth.tar --config-file tests/test-mpadd-minimal-no0.yaml #not-in-vendor-scripts'
  'mpadd-minimal|--checkpoint-file tests/test-mp_add_minimized_q.pth.tar --config-file tests/test-mpadd-minimal.yaml'
  'pooling-strideonly|--checkpoint-file tests/test-mnist-extrasmallnet.pth.tar --config-file tests/test-pooling-strideonly.yaml'
  'pooling2x2s1|--checkpoint-file tests/test-mnist-extrasmallnet.pth.tar --config-file tests/test-pooling2x2s1.yaml #not-in-vendor-scripts'
  'pooling3x3s1|--checkpoint-file tests/test-mnist-extrasmallnet.pth.tar --config-file tests/test-pooling3x3s1.yaml --stop-after 0'
  'pooling4x4s2|--checkpoint-file tests/test-mnist-extrasmallnet.pth.tar --config-file tests/test-pooling4x4s2.yaml --stop-after 0'
  'readahead-cifar10-hwc|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-readahead-cifar10-hwc.yaml --read-ahead'
  'readahead-cifar10-hwc~v1|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-readahead-cifar10-hwc.yaml --stop-after 0 --read-ahead'
  'readahead-cifar10-hwc~v2|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-readahead-cifar10-hwc.yaml --stop-after 0 --calcx4'
  'readahead-cifar10-hwc~v3|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-readahead-cifar10-hwc.yaml --stop-after 0 --calcx4 --read-ahead'
  'readahead-cifar10-hwc~v4|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-readahead-cifar10-hwc.yaml --stop-after 1 --calcx4 --read-ahead'
  'resnet-4l|NOCKPT --checkpoint-file tests/test-resnet.pth.tar --config-file tests/test-resnet-4l.yaml'
  'resnet|NOCKPT --checkpoint-file tests/test-resnet.pth.tar --config-file tests/test-resnet.yaml'
  'speechcom-chw|--checkpoint-file tests/test-speechcom-net7.pth.tar --config-file tests/test-speechcom-chw.yaml'
  'stream-cifar-hwc|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-stream-cifar-hwc.yaml --allow-streaming'
  'stream-cifar-hwc~v1|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-stream-cifar-hwc.yaml --stop-after 1 --allow-streaming'
  'stream-cifar-hwc~v2|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-stream-cifar-hwc.yaml --stop-after 2 --allow-streaming'
  'stream-cifar-transition|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-stream-cifar-transition.yaml --fifo'
  'stream-cifar-transition~v1|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-stream-cifar-transition.yaml --zero-sram --fifo'
  'stream-cifar-transition~v2|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-stream-cifar-transition.yaml --zero-sram --allow-streaming'
  'stream-cifar|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-stream-cifar.yaml --allow-streaming'
  'stream-cifar~v1|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-stream-cifar.yaml --stop-after 1 --allow-streaming'
  'stream-cifar~v2|--checkpoint-file tests/test-cifar10.pth.tar --config-file tests/test-stream-cifar.yaml --stop-after 2 --allow-streaming'
  'depthwise-quantpool-stream-bias|--config-file tests/test-depthwise-quantpool-stream-bias.yaml --fifo'
  'depthwise-quantpool-stream|--config-file tests/test-depthwise-quantpool-stream.yaml --fifo'
  'fifostream-15ch-hwc|--config-file tests/test-fifostream-15ch-hwc.yaml --fifo'
  'fifostream-16ch-hwc|--config-file tests/test-fifostream-16ch-hwc.yaml --fifo'
  'fifostream-32-hwc|--config-file tests/test-fifostream-32-hwc.yaml --fifo'
  'fifostream-32-hwc~v1|--config-file tests/test-fifostream-32-hwc.yaml --fifo --stop-after 0'
  'fifostream-32-hwc~v2|--config-file tests/test-fifostream-32-hwc.yaml --fifo --stop-after 1'
  'fifostream-32-hwc~v3|--config-file tests/test-fifostream-32-hwc.yaml --fifo --riscv --fast-fifo --input-fifo'
  'fifostream-32-hwc~v4|--config-file tests/test-fifostream-32-hwc.yaml --fifo --riscv --fast-fifo-quad --input-fifo'
  'fifostream-32|--config-file tests/test-fifostream-32.yaml --fifo'
  'fifostream-32~v1|--config-file tests/test-fifostream-32.yaml --fifo --stop-after 0'
  'fifostream-32~v2|--config-file tests/test-fifostream-32.yaml --fifo --stop-after 1'
  'fifostream-640-hwc|--config-file tests/test-fifostream-640-hwc.yaml --fifo'
  'fifostream-640-hwc~v1|--config-file tests/test-fifostream-640-hwc.yaml --fifo --stop-after 1'
  'fifostream-640-small|--config-file tests/test-fifostream-640-small.yaml --fifo'
  'fifostream-640-small~v1|--config-file tests/test-fifostream-640-small.yaml --fifo --stop-after 0'
  'fifostream-640-small~v2|--config-file tests/test-fifostream-640-small.yaml --fifo --stop-after 1'
  'fifostream-640|--config-file tests/test-fifostream-640.yaml --fifo'
  'fifostream-640~v1|--config-file tests/test-fifostream-640.yaml --fifo --stop-after 1'
  'fifostream-expandcontract|--config-file tests/test-fifostream-expandcontract.yaml --fifo --riscv --fast-fifo'
  'fifostream-expandcontract~v1|--config-file tests/test-fifostream-expandcontract.yaml --riscv --ignore-streaming'
  'fifostream-expandcontract~v2|--config-file tests/test-fifostream-expandcontract.yaml --riscv --stop-after 1 --ignore-streaming'
  'fifostream-expandcontract~v3|--config-file tests/test-fifostream-expandcontract.yaml --riscv --stop-after 2 --ignore-streaming'
  'fifostream-group-notvga64x48-hwc|--config-file tests/test-fifostream-group-notvga64x48-hwc.yaml --fifo --riscv --fast-fifo'
  'fifostream-nonsquare-hwc|--config-file tests/test-fifostream-nonsquare-hwc.yaml --fifo'
  'fifostream-nonsquare-hwc~v1|--config-file tests/test-fifostream-nonsquare-hwc.yaml --fifo --riscv'
  'fifostream-nonsquare|--config-file tests/test-fifostream-nonsquare.yaml --fifo'
  'fifostream-nonsquare~v1|--config-file tests/test-fifostream-nonsquare.yaml --fifo --stop-after 0'
  'fifostream-notvga128x96-hwc|--config-file tests/test-fifostream-notvga128x96-hwc.yaml --fifo --riscv --fast-fifo'
  'fifostream-notvga190x120-hwc|--config-file tests/test-fifostream-notvga190x120-hwc.yaml --fifo --riscv --fast-fifo'
  'fifostream-notvga40x30-hwc|--config-file tests/test-fifostream-notvga40x30-hwc.yaml --fifo --riscv --fast-fifo'
  'fifostream-notvga64x48-hwc-sc|--config-file tests/test-fifostream-notvga64x48-hwc-sc.yaml --fifo --riscv --fast-fifo-quad'
  'fifostream-notvga64x48-hwc-sc2|--config-file tests/test-fifostream-notvga64x48-hwc-sc2.yaml --fifo --riscv --fast-fifo-quad --stop-after 1'
  'fifostream-notvga64x48-hwc|--config-file tests/test-fifostream-notvga64x48-hwc.yaml --fifo --riscv --fast-fifo'
  'fifostream-notvga64x48-hwc~v1|--config-file tests/test-fifostream-notvga64x48-hwc.yaml --fifo --riscv --fast-fifo --stop-after 1'
  'fifostream-notvga64x48-hwc~v2|--config-file tests/test-fifostream-notvga64x48-hwc.yaml --fifo --riscv --fast-fifo-quad'
  'fifostream-notvga80x60-hwc|--config-file tests/test-fifostream-notvga80x60-hwc.yaml --fifo --riscv --fast-fifo'
  'fifostream-pool-hwc|--config-file tests/test-fifostream-pool-hwc.yaml --fifo'
  'fifostream-pool-stride-hwc-tall|--config-file tests/test-fifostream-pool-stride-hwc-tall.yaml --fifo'
  'fifostream-pool-stride-hwc|--config-file tests/test-fifostream-pool-stride-hwc.yaml --fifo'
  'fifostream-pool-stride|--config-file tests/test-fifostream-pool-stride.yaml --fifo'
  'fifostream-pool|--config-file tests/test-fifostream-pool.yaml --fifo'
  'fifostream-quant|--config-file tests/test-fifostream-quant.yaml --fifo'
  'fifostream-quant~v1|--config-file tests/test-fifostream-quant.yaml --fifo --stop-after 0'
  'fifostream-transition-early|--config-file tests/test-fifostream-transition-early.yaml --fifo --stop-after 5'
  'fifostream-transition-early~v1|--config-file tests/test-fifostream-transition-early.yaml --fifo --stop-after 5 --riscv --fast-fifo'
  'multipass5-stream|--config-file tests/test-multipass5-stream.yaml --fifo'
  'multipass5-stream~v1|--config-file tests/test-multipass5-stream.yaml --fast-fifo --riscv'
  'multipass5-stream~v2|--config-file tests/test-multipass5-stream.yaml --fast-fifo-quad --riscv'
  'outputshift|--config-file tests/test-outputshift.yaml --fifo'
  'stream-transition-nofifo|--config-file tests/test-stream-transition-nofifo.yaml --allow-streaming #not-in-vendor-scripts'
  'stream-transition|--config-file tests/test-stream-transition.yaml --fifo'
  'streaming-group0-pool4|--config-file tests/test-streaming-group0-pool4.yaml --fifo'
)
export VENDOR_TABLE=$(printf "%s\n" "${VENDOR[@]}")

one() {
  entry=$1
  case "$entry" in
    *"|"*) prefix=${entry%%|*}; args=${entry#*|} ;;
    *) prefix=$entry
       args=$(printf "%s\n" "$VENDOR_TABLE" | grep -m1 "^$entry|" | cut -d"|" -f2-)
       [ -n "$args" ] || args="--config-file tests/test-$entry.yaml" ;;
  esac
  args=${args%%#*}
  case "$args" in
    NOCKPT*) printf "%-34s %-9s %s\n" "$prefix" NO-CKPT "checkpoint not in the work tree:${args#NOCKPT}"
             return ;;
  esac
  case "$args" in *--no-mexpress*) mx="" ;; *) mx="--mexpress" ;; esac
  dir=${prefix//\~/-}
  cd "$SYN" || exit 2
  if ! nice -n "$NICE" "$PY" ai8xize.py --prefix "$dir" $args $mx --test-dir "$OUT" \
      --device MAX78000 --compact-data --overwrite --no-version-check --timer 0 \
      > "$OUT/$dir.gen.log" 2>&1; then
    printf "%-34s %-9s %s\n" "$prefix" GEN-FAIL "$(grep -m1 -i error "$OUT/$dir.gen.log" | cut -c1-120)"
    return
  fi
  res=$(cd / && timeout 900 $ACCELSTUB run max78000 --program "$OUT/$dir" 2>&1); rc=$?
  case $rc in 0) r=PASS ;; 1) r=FAIL ;; *) r=ERROR ;; esac
  printf "%-34s %-9s %s\n" "$prefix" "$r" "$(echo "$res" | tail -1 | cut -c1-200)"
}
export -f one
case "${1:-}" in
  "") set -- $(ls "$SYN"/tests/test-*.yaml | sed 's|.*/test-||; s|\.yaml$||') ;;
  --vendor) set -- $(printf "%s\n" "${VENDOR[@]}" | cut -d"|" -f1 | grep -v "~") ;;
  --vendor-all) set -- $(printf "%s\n" "${VENDOR[@]}" | cut -d"|" -f1) ;;
esac
printf "%s\n" "$@" | xargs -P "$PAR" -I{} bash -c 'one "$@"' _ {}
