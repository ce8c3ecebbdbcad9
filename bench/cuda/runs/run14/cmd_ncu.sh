# Run 14, call 2 (prepared in session 11): where the sliding layers' decode attention and the
# residual epilogue spend their instructions, per SASS instruction (run 12 call 6 exported the
# source page in its CUDA view, which has no metric columns), 12B at depth 32768.
bash bench/cuda/h200_run.sh build > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
$GEM synth --profile 12b -q -o $M/g12b.gguf
for k in attention_decode_kernel residual_kernel; do
  bash bench/cuda/ncu_sass.sh "$k" $M/g12b.gguf 32768
done
