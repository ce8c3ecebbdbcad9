bash bench/cuda/h200_run.sh build > $OUT/run.log 2>&1
export LD_LIBRARY_PATH=$PWD/.device/deps/lib
GEM=build-dev/bin/gem; M=/tmp/models; mkdir -p $M
$GEM synth --profile 12b -q -o $M/g12b.gguf
while IFS= read -r line; do
  echo "sweep 12b: $line" | tee -a $OUT/summary.txt
  env $line $GEM bench -m $M/g12b.gguf -p 0 -n 128 -d 0 -r 2 --backend cuda 2>&1 | grep -E "^\| gemma" | sed -E 's/\| gemma4 12B \| 6.71 GiB \| 11.91 B \| cuda \| f16 \| 512 //' | tee -a $OUT/summary.txt
done < bench/cuda/runs/run7/sweep4_lines.txt
NCU_FILE=bench/cuda/runs/run7/ncu4_lines.txt bash bench/cuda/ncu_bulk.sh >> $OUT/run.log 2>&1
grep -E "  void|Duration|DRAM Th" $OUT/ncu.txt | cut -c1-100
