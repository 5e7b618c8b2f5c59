# The rest of benchmarks/plans/two-gpu-profile.sh after a lost host, in the device time left
# (~16 min): the served graph-size test first, then TP=2's 8k profile.
step model env PYTHONPATH=$SITE_OFFICIAL python3 benchmarks/run.py setup --shape 8b
step graphs python3 benchmarks/run.py layout sp2 sp2_graphs1024 shift --workloads lat1k,mid
step profile_8k env PYTHONPATH=$SITE_OURS python3 benchmarks/step_profile.py \
  --layout tp2 --prefill 8192 --decode 256 --out "$res/profile-p8192-d256"
