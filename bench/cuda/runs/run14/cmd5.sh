# Run 14, call 5 (the last device minutes, on the warm machine of call 4): the per-SASS-
# instruction profile of the sliding layers' decode attention and of the residual epilogue, 12B at
# depth 32768 (cmd_ncu.sh without its rebuild; build-dev and the 12B from calls 3-4).
source bench/cuda/device_env.sh
[ -f $M/g12b.gguf ] || $GEM synth --profile 12b -q -o $M/g12b.gguf
for k in attention_decode_kernel residual_kernel; do
  bash bench/cuda/ncu_sass.sh "$k" $M/g12b.gguf 32768
done
