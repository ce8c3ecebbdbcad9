# Run 8, call 3: build, kernel/backend tests, then the nsys timeline of 12B decode steps in the
# graph (per kernel duration and gap) for each line of nsys3_lines.txt at depth 0, the first
# line also at depth 32768, and the 31B's first line at depth 0.
bash bench/cuda/h200_run.sh test > $OUT/run.log 2>&1
tail -3 $OUT/summary.txt
NSYS_FILE=bench/cuda/runs/run8/nsys3_lines.txt bash bench/cuda/nsys_steps.sh
head -1 bench/cuda/runs/run8/nsys3_lines.txt > /tmp/first.txt
NSYS_FILE=/tmp/first.txt NSYS_DEPTH=32768 bash bench/cuda/nsys_steps.sh
NSYS_FILE=/tmp/first.txt NSYS_MODEL=31b bash bench/cuda/nsys_steps.sh
