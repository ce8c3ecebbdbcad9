# Last call of run 7: tests and 12B parity with the candidate (block-ring bulk products, 8
# consumer warps, PDL) in the environment; 12B decode at depth 0 and 32768 and 31B at depth 0
# per line of sweep9_lines.txt; 12B prefill with PDL off/on.
export GEM_CUDA_MV_BULK=1 GEM_CUDA_PDL=1 GEM_CUDA_MV_BULK_WARPS=8
SWEEP_FILE=bench/cuda/runs/run7/sweep9_lines.txt SWEEP_DEPTHS=0,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
export LD_LIBRARY_PATH=$PWD/.device/deps/lib
GEM=build-dev/bin/gem; M=/tmp/models
for pdl in 0 1; do
  echo "pp 12b: GEM_CUDA_PDL=$pdl" | tee -a $OUT/summary.txt
  GEM_CUDA_PDL=$pdl GEM_CUDA_MV_BULK=0 $GEM bench -m $M/g12b.gguf -p 512,4096 -n 0 -r 2 --backend cuda 2>&1 | grep -E "^\| gemma" | tee -a $OUT/summary.txt
done
$GEM synth --profile 31b -q -o $M/g31b.gguf
while IFS= read -r line; do
  echo "sweep 31b: $line" | tee -a $OUT/summary.txt
  env $line $GEM bench -m $M/g31b.gguf -p 0 -n 128 -d 0 -r 2 --backend cuda 2>&1 | grep -E "^\| gemma" | tee -a $OUT/summary.txt
done < bench/cuda/runs/run7/sweep9_lines.txt
