# Run 9, call 7 (same machine as calls 5-6, llama.cpp's build finished): gem's decode figures
# with nothing else running (call 5 measured them while llama.cpp compiled on 14 cores).
source bench/cuda/device_env.sh
for p in 12b 31b; do
  $GEM bench -m $M/g$p.gguf -p 0 -n 128 -d 0,4096,32768 -r 3 --backend cuda 2>&1 | grep -E '^\| gemma' | tee -a $OUT/gem_tg.txt
done
