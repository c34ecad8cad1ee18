#!/usr/bin/env bash
# On the GPU machine: record every workload, the counters kernels with shapes, and the same kernels under ncu.
set -u
cd "$(dirname "$0")"
R=/tmp/rec; mkdir -p $R
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,power.limit,enforced.power.limit,clocks.max.sm,clocks.max.mem,memory.total --format=csv
  python3 -c "import torch;print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  which ncu nsys; ncu --version | tail -1; nproc; } > $R/env.txt 2>&1
cat $R/env.txt
python3 workloads.py $R cold_start_compile 2>&1 | tail -3
python3 workloads.py $R transformer_bf16_train tiny_kernels_launch gemv_sync_io pageable_h2d cuda_graph_replay embedding_bag dataloader_bound 2>&1 | grep -v Warning | tail -30
python3 counters.py trace $R/h100_counters_kernels.pt.trace.json.gz 2>&1 | tail -3
ncu --query-metrics > $R/ncu_query.txt 2>&1
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum
for op in fadd fmul ffma hadd hmul hfma dadd dmul dfma; do M=$M,smsp__sass_thread_inst_executed_op_${op}_pred_on.sum; done
for t in sm__ops_path_tensor_src_bf16_dst_fp32 sm__inst_executed_pipe_tensor_op_gmma sm__inst_executed_pipe_tensor_op_hmma smsp__inst_executed_pipe_tensor_op_hmma sm__pipe_tensor_op_gmma_cycles_active sm__pipe_tensor_op_hmma_cycles_active; do
  grep -q "^$t " $R/ncu_query.txt && M=$M,$t.sum; done
echo "metrics: $M"
timeout 300 ncu --nvtx --nvtx-include "measure/" --metrics $M --csv --page raw python3 counters.py run > $R/ncu_counters.csv 2> $R/ncu_err.txt
echo "ncu rc=$? rows=$(wc -l < $R/ncu_counters.csv)"; tail -3 $R/ncu_err.txt
ls -la $R
tar czf - -C /tmp rec | split -b 15m - $OUT/rec.tgz.part-
ls -la $OUT
