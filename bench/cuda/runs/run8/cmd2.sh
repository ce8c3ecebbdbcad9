# Run 8, call 2: tests (bulk variants incl. two rows per warp) and 12B parity with bulk + PDL in
# the environment; per line of sweep2_lines.txt the 12B and 31B tg128 @ d0.
export GEM_CUDA_MV_BULK=1 GEM_CUDA_PDL=1 GEM_CUDA_MV_BULK_R=2
SWEEP_FILE=bench/cuda/runs/run8/sweep2_lines.txt SWEEP_31B=1 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
tail -3 $OUT/run.log
