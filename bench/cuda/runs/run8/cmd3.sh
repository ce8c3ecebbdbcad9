# Run 8, call 3: build and tests, then CUPTI timelines of decode steps in the graph (per kernel
# duration and gap): the 12B per line of trace3_lines.txt at depth 0, its first line at depth
# 32768 and on the 31B.
bash bench/cuda/h200_run.sh test > $OUT/run.log 2>&1
tail -3 $OUT/summary.txt
TRACE_FILE=bench/cuda/runs/run8/trace3_lines.txt bash bench/cuda/trace_steps.sh
head -1 bench/cuda/runs/run8/trace3_lines.txt > /tmp/first.txt
TRACE_FILE=/tmp/first.txt TRACE_DEPTH=32768 bash bench/cuda/trace_steps.sh
TRACE_FILE=/tmp/first.txt TRACE_MODEL=31b bash bench/cuda/trace_steps.sh
