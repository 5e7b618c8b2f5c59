# The 4xH200 serving matrix: the seeds' setting scaled
# to 4 GPUs, Llama-3.1-70B shape in bf16 (dummy weights; FP8 later if time
# allows: it needs its own layout names, and quantized layers are copied, not
# shared, by shift's full-TP model).  A plan for benchmarks/session.sh, kind
# nvidia-h200-x4; a 70B layout is ~6-7 min (start with compile and graphs ~3,
# workloads ~3-4, untested estimate), so it spans two sessions: the second
# carries the first's res.tgz as RESUME.
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/four-gpu.sh /root/gh [RESUME] \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 480
# Order: ours, then the peer's same layouts (the pairs that must share a host),
# then the upstream references.  Shift runs at its default threshold (chosen
# on 2 GPUs, 8B: re-measure here if the rows suggest it).
W=lat1k,lat8k,lat32k,sat,ctx
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape 70b
step ours python3 benchmarks/run.py layout tp2_sp2 shift_tp2_sp2 --shape 70b --workloads $W
step peer python3 benchmarks/run.py layout arctic_tp2_sp2 arctic_shift_tp2_sp2 --shape 70b --workloads $W
step refs python3 benchmarks/run.py layout tp4 dp2_tp2 --shape 70b --workloads $W
step report python3 benchmarks/run.py report --shape 70b
