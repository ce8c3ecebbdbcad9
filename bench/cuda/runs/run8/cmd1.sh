# Run 8, call 1: tests and 12B parity with whole-row bulk products and PDL in the environment;
# per line of sweep1_lines.txt the 12B and 31B at pp512/pp4096 and tg128 @ d0.
export GEM_CUDA_MV_BULK=1 GEM_CUDA_PDL=1
SWEEP_FILE=bench/cuda/runs/run8/sweep1_lines.txt SWEEP_31B=1 SWEEP_P=512,4096 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
tail -5 $OUT/run.log
