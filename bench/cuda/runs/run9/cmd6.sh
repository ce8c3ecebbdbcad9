# Run 9, call 6 (after call 5 on the same machine: build-dev and /tmp/models there): 12B tg128
# @ d0 with nothing else running, preload on/off and PDL off, two rounds.
source bench/cuda/device_env.sh
cmake --build build-dev -j16 --target gem > /dev/null 2>&1
for round in 1 2; do
  for cfg in "GEM_CUDA_MV_PRELOAD=1" "GEM_CUDA_MV_PRELOAD=0" "GEM_CUDA_PDL=prefill"; do
    echo "$round $cfg $(env $cfg $GEM bench -m $M/g12b.gguf -p 0 -n 128 -d 0 -r 2 --backend cuda 2>&1 | grep -E '^\| gemma' | cut -d'|' -f9,10)"
  done
done | tee $OUT/sweep6.txt
