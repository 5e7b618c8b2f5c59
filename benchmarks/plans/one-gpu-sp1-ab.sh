# Is ours slower than the official wheel at SP=1 on a launch-bound 1k prefill?
# (a plan for benchmarks/session.sh; kind nvidia-h200, ~6 min)
#   (env -u OUT setsid bash benchmarks/session.sh run benchmarks/plans/one-gpu-sp1-ab.sh /root/gh \
#      > /dev/null 2>&1 < /dev/null &) && bash benchmarks/session.sh wait 470
# one-gpu-sp1.sh served ours 13% slower at 1k (TTFT p50 38.8/39.7 vs 34.3/35.0 ms,
# the engine's prefill 27.5/28.2 vs 24.6/24.0 ms) and equal at 8k and in decode;
# one profile each showed the same ops with every host-side op ~2x slower in
# ours.  Alternate the wheels, and sample per-thread CPU use while each runs
# (a spinning thread would show).
release 0.26.0 || return 0
top_sampler() {   # top_sampler FILE: per-thread CPU every 5 s until killed
  while true; do date +%T; top -b -H -n 1 -w 200 | sed -n 7,22p; sleep 5; done > "$1" 2>&1
}
for i in 1 2; do
  for w in ours official; do
    site=$SITE_OFFICIAL; [[ $w == ours ]] && site=$SITE_OURS
    top_sampler "$res/top-$w-$i.txt" & sampler=$!
    step "ab_${w}_$i" env PYTHONPATH=$site python3 benchmarks/step_profile.py --layout tp1 \
      --prefill 1024 --decode 128 --out "$res/profile-p1024-d128-$w-$i"
    kill $sampler
  done
done
